package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images/csihostdir"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// enableControllerAttachDetach: false, as the kubelet 1.35 has it: the
// Node is registered without the controller-managed-attach-detach
// annotation (and loses it when the configuration changes at a restart),
// so the attach/detach controller makes no VolumeAttachment for it; a CSI volume
// whose driver needs attaching is in the Node's volumesInUse but fails
// with the kubelet's FailedAttachVolume message (its CSI attacher refuses
// to attach from a node) and the pod never starts, while a driver with
// attachRequired: false mounts as with the controller.
func TestCSINoControllerAttachDetach(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-no-adc"
	h := extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + "enableControllerAttachDetach: false\n"})
	annotation := func() (string, bool) {
		n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"]
		return v, ok
	}
	if v, ok := annotation(); ok {
		t.Fatalf("registered without the controller: annotation %q", v)
	}

	ns := cluster.NewNamespace(t)
	driver := func(suffix string, attach bool) string {
		// Short: its sockets' paths under the node's root dir stay within
		// a unix socket's 108 bytes.
		d := suffix + strings.TrimPrefix(ns, "e2e-") + ".hostdir.test"
		csiDriverObject(t, d, attach, "", storagev1.VolumeLifecyclePersistent)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		drv, err := csihostdir.Start(ctx, csihostdir.Config{Name: d, NodeID: name, StateDir: t.TempDir(), Stage: true, MaxVolumes: 7,
			Endpoint:    filepath.Join(h.RootDir(), "plugins", d, "csi.sock"),
			RegistryDir: filepath.Join(h.RootDir(), "plugins_registry")})
		if err != nil {
			t.Fatal(err)
		}
		awaitRegistration(t, drv)
		return d
	}
	attached, free := driver("a", true), driver("f", false)

	persistentVolume(t, ns+"-att", "", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: attached, VolumeHandle: "vol-a"}}, nil)
	claim(t, ns, "att", "", ns+"-att")
	stuck := claimPodSpec(ns, "stuck", "att", false)
	stuck.Spec.NodeName = name
	cluster.CreatePod(t, stuck)
	persistentVolume(t, ns+"-free", "", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: free, VolumeHandle: "vol-f"}}, nil)
	claim(t, ns, "free", "", ns+"-free")
	ok := claimPodSpec(ns, "ok", "free", false)
	ok.Spec.NodeName = name
	cluster.CreatePod(t, ok)

	// The kubelet's event, reason and message.
	want := `FailedAttachVolume: AttachVolume.Attach failed for volume "` + ns + `-att" : attaching volumes from the kubelet is not supported`
	pollUntil(t, time.Minute, "the attach failure event", func() bool {
		return slices.ContainsFunc(events(t, ns, "stuck"), func(e string) bool { return strings.Contains(e, want) })
	})
	inUse := v1.UniqueVolumeName("kubernetes.io/csi/" + attached + "^vol-a")
	pollUntil(t, 30*time.Second, "the volume in the node's volumesInUse", func() bool {
		n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil && slices.Contains(n.Status.VolumesInUse, inUse)
	})
	waitReady(t, ns, "ok")
	execIn(t, ns, "ok", "c", "sh", "-c", "echo mounted > /data/f")

	// The controller leaves the node alone: no VolumeAttachment, the pod
	// still waiting.
	list, err := cluster.Client().StorageV1().VolumeAttachments().List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, va := range list.Items {
		if va.Spec.NodeName == name {
			t.Errorf("VolumeAttachment %s for the node without the controller", va.Name)
		}
	}
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "stuck", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodPending {
		t.Errorf("the pod of the attachable volume is %s", p.Status.Phase)
	}
	removePod(t, ns, "stuck")
	removePod(t, ns, "ok")

	// The same node's configuration changed, as an operator changes it:
	// the annotation follows at the restart, both ways. (The controller
	// keeps a node it once managed until the Node is deleted, which is why
	// the volumes above were on a node registered without it.)
	for _, on := range []bool{true, false} {
		conf := fmt.Sprintf("%senableControllerAttachDetach: %t\n", kcHeader, on)
		if err := os.WriteFile(filepath.Join(h.RootDir()+".kubelet", "config.yaml"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.Restart(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, 30*time.Second, fmt.Sprintf("the annotation with enableControllerAttachDetach %t", on), func() bool {
			v, ok := annotation()
			return ok == on && (!on || v == "true")
		})
	}
}

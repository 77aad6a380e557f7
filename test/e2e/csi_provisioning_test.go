package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images/csihostdir"
	"github.com/moby/sys/mountinfo"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startSidecars runs upstream's external-provisioner and
// external-attacher against the driver's socket until the test ends
// (harness.StartCSISidecars); their log tails go to the test's log if it
// failed. It returns the provisioner's log's path.
func startSidecars(t *testing.T, ctx context.Context, socket string) string {
	t.Helper()
	s, err := cluster.StartCSISidecars(ctx, socket, strings.ReplaceAll(t.Name(), "/", "_"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if !t.Failed() {
			return
		}
		for _, l := range []string{s.ProvisionerLog, s.AttacherLog} {
			b, _ := os.ReadFile(l)
			t.Logf("---- %s log tail ----\n%s", filepath.Base(l), b[max(0, len(b)-4000):])
		}
	})
	return s.ProvisionerLog
}

// CSI as a cluster deploys it: upstream's external-provisioner and
// external-attacher (built from their modules) run against the API server
// as the controller side of the test driver, whose controller service
// makes the volumes; a StorageClass (WaitForFirstConsumer) of that
// provisioner. A StatefulSet's volumeClaimTemplates (a filesystem claim
// and a Block one) are provisioned on the node through CSI, attached by
// the attach/detach controller and the external-attacher (VolumeAttachment
// attached, ControllerPublishVolume called), staged and published by
// hostlet. What the pod writes is in the driver's volumes and survives the
// pod deleted and made again on the node and hostlet killed (-9) and
// restarted with the volumes in use (no publish again). Once the
// StatefulSet is gone nothing is left mounted or mapped, the volumes are
// detached (ControllerUnpublishVolume, the VolumeAttachments gone) and,
// the claims deleted, the provisioner deletes the volumes and their PVs.
func TestCSIProvisioningStatefulSet(t *testing.T) {
	skipIfNoCluster(t)
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	// Built (harness.StartCSISidecars) with a context of their own: cold
	// (empty GOCACHE) the two take 286 s user + 64 s sys CPU, 10 min wall on
	// a loaded 2-core host.
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	name := csiDriverName(ns)
	state := t.TempDir()
	csiDriverObject(t, name, true, "", storagev1.VolumeLifecyclePersistent)
	dctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	d, err := csihostdir.Start(dctx, csihostdir.Config{Name: name, NodeID: nodeName, StateDir: state, Stage: true, Controller: true,
		Endpoint:    filepath.Join(node.RootDir(), "plugins", name, "csi.sock"),
		RegistryDir: filepath.Join(node.RootDir(), "plugins_registry")})
	if err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, d)
	socket := filepath.Join(node.RootDir(), "plugins", name, "csi.sock")
	provLog := startSidecars(t, bctx, socket)

	class := ns + "-csi"
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	del := v1.PersistentVolumeReclaimDelete
	if _, err := cluster.Client().StorageV1().StorageClasses().Create(ctxT(t), &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Provisioner: name, VolumeBindingMode: &wffc, ReclaimPolicy: &del}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().StorageV1().StorageClasses().Delete(t.Context(), class, metav1.DeleteOptions{})
	})

	apps := cluster.Client().AppsV1().StatefulSets(ns)
	labels := map[string]string{"app": "db"}
	pod := busybox(ns, "", "sleep", "3600").Spec
	pod.RestartPolicy = v1.RestartPolicyAlways
	pod.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.NodeSelector = map[string]string{v1.LabelHostname: nodeName}
	pod.Containers[0].VolumeMounts = []v1.VolumeMount{mount("data", "/data")}
	pod.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "raw", DevicePath: "/dev/xvda"}}
	block := v1.PersistentVolumeBlock
	template := func(name, size string, mode *v1.PersistentVolumeMode) v1.PersistentVolumeClaim {
		return v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, VolumeMode: mode,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
		}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr(int32(1)), ServiceName: "db",
		Selector:             &metav1.LabelSelector{MatchLabels: labels},
		Template:             v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		VolumeClaimTemplates: []v1.PersistentVolumeClaim{template("data", "64Mi", nil), template("raw", "8Mi", &block)},
	}}
	if _, err := apps.Create(ctxT(t), sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := cluster.WaitForPod(ctxT(t), ns, "db-0", 3*time.Minute, harness.PodReady)
	if err != nil {
		b, _ := os.ReadFile(provLog)
		t.Fatalf("db-0 never Ready: %v\n%s", err, b[max(0, len(b)-3000):])
	}

	handles := map[string]string{} // claim: volume handle
	pvs := map[string]string{}     // claim: PV
	for _, claim := range []string{"data", "raw"} {
		pvc, err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctxT(t), claim+"-db-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := cluster.Client().CoreV1().PersistentVolumes().Get(ctxT(t), pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != name || pv.Spec.NodeAffinity == nil {
			t.Fatalf("PV %s of %s: %+v", pv.Name, claim, pv.Spec)
		}
		handles[claim], pvs[claim] = pv.Spec.CSI.VolumeHandle, pv.Name
		va, err := cluster.Client().StorageV1().VolumeAttachments().Get(ctxT(t), attachmentName(pv.Spec.CSI.VolumeHandle, name), metav1.GetOptions{})
		if err != nil || !va.Status.Attached || va.Status.AttachmentMetadata["node"] != nodeName {
			t.Errorf("VolumeAttachment of %s: %+v %v", claim, va, err)
		}
	}
	// The sidecars may call again (the attacher attaches again when it
	// sees its own update of the VolumeAttachment: the calls are
	// idempotent); the node stages and publishes each volume once.
	for _, m := range []string{"CreateVolume", "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"} {
		seen := map[string]int{}
		for _, c := range csiCalls(t, state, m) {
			seen[c.Volume]++
		}
		once := m == "NodeStageVolume" || m == "NodePublishVolume"
		if len(seen) != 2 || seen[handles["data"]] == 0 || seen[handles["raw"]] == 0 ||
			(once && (seen[handles["data"]] != 1 || seen[handles["raw"]] != 1)) {
			t.Errorf("%s calls by volume: %v, want each of %v (once: %v)", m, seen, handles, once)
		}
	}
	for _, c := range csiCalls(t, state, "NodeStageVolume") {
		if c.Publish["node"] != nodeName {
			t.Errorf("NodeStageVolume of %s without the attacher's publish context: %+v", c.Volume, c.Publish)
		}
	}

	write := func(line string) {
		t.Helper()
		execIn(t, ns, "db-0", "c", "sh", "-c", "echo "+line+" >> /data/f && printf "+line+" | dd of=/dev/xvda bs=512 seek=2 conv=notrunc,fsync 2>/dev/null")
	}
	read := func(all, last string) {
		t.Helper()
		if out := execIn(t, ns, "db-0", "c", "cat", "/data/f"); out != all {
			t.Errorf("db-0 reads %q in /data, want %q", out, all)
		}
		if out := execIn(t, ns, "db-0", "c", "sh", "-c", fmt.Sprintf("dd if=/dev/xvda bs=1 skip=1024 count=%d 2>/dev/null", len(last))); out != last {
			t.Errorf("db-0 reads %q from its block volume, want %q", out, last)
		}
		if b, err := os.ReadFile(filepath.Join(csihostdir.VolumeDir(state, handles["data"]), "f")); err != nil || string(b) != all {
			t.Errorf("the driver's volume has %q %v, want %q", b, err, all)
		}
		if b, err := os.ReadFile(csihostdir.BlockFile(state, handles["raw"])); err != nil || !bytes.HasPrefix(b[1024:], []byte(last)) {
			t.Errorf("the driver's block file at 1024: %v, want %q", err, last)
		}
	}
	write("one")
	read("one\n", "one")

	// The pod deleted: the StatefulSet makes it again on the node, with
	// its data; the first pod's volumes are unpublished.
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := waitNewPod(t, ns, "db-0", first.UID)
	noMountsLeft(t, first.UID)
	read("one\n", "one")
	write("two")
	published := len(csiCalls(t, state, "NodePublishVolume"))

	// hostlet killed with the volumes in use and restarted: the same
	// container runs on with its data, nothing published again.
	node.Kill()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, d)
	read("one\ntwo\n", "two")
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "db-0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p.UID != second.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("db-0 after the restart: uid %s (was %s), restarts %d", p.UID, second.UID, p.Status.ContainerStatuses[0].RestartCount)
	}
	if n := len(csiCalls(t, state, "NodePublishVolume")); n != published {
		t.Errorf("NodePublishVolume called %d times after the restart, %d before", n, published)
	}

	// The StatefulSet gone: nothing left mounted or mapped, both volumes
	// unstaged and detached; the claims deleted, the volumes are too.
	if err := apps.Delete(ctxT(t), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "db-0")
	noMountsLeft(t, second.UID)
	csiDir := filepath.Join(node.RootDir(), "plugins", "kubernetes.io", "csi")
	// Only this test's: its driver's staging dir, its PVs' block paths
	// (other tests' drivers may still be tearing theirs down).
	ours := func(m *mountinfo.Info) (skip, stop bool) {
		p := m.Mountpoint
		return !(strings.Contains(p, name) || strings.Contains(p, pvs["data"]) || strings.Contains(p, pvs["raw"])), false
	}
	pollUntil(t, 2*time.Minute, "both volumes unstaged and nothing of theirs mounted under "+csiDir, func() bool {
		mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) {
			if !strings.HasPrefix(m.Mountpoint, csiDir+"/") {
				return true, false
			}
			return ours(m)
		})
		return err == nil && len(mounts) == 0 && len(csiCalls(t, state, "NodeUnstageVolume")) == 2
	})
	if l := loopsOver(t, csihostdir.BlockFile(state, handles["raw"])); l != "" {
		t.Errorf("loop device left: %s", l)
	}
	pollUntil(t, 3*time.Minute, "both volumes detached", func() bool {
		for _, h := range handles {
			if _, err := cluster.Client().StorageV1().VolumeAttachments().Get(ctxT(t), attachmentName(h, name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		unpublished := map[string]bool{}
		for _, c := range csiCalls(t, state, "ControllerUnpublishVolume") {
			unpublished[c.Volume] = true
		}
		return unpublished[handles["data"]] && unpublished[handles["raw"]]
	})
	for claim, pv := range pvs {
		if err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Delete(ctxT(t), claim+"-db-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, 2*time.Minute, "the PV of "+claim+" deleted by the provisioner", func() bool {
			_, err := cluster.Client().CoreV1().PersistentVolumes().Get(ctxT(t), pv, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
	if _, err := os.Stat(csihostdir.VolumeDir(state, handles["data"])); !os.IsNotExist(err) {
		t.Errorf("the filesystem volume after DeleteVolume: %v", err)
	}
	if _, err := os.Stat(csihostdir.BlockFile(state, handles["raw"])); !os.IsNotExist(err) {
		t.Errorf("the block volume after DeleteVolume: %v", err)
	}
}

// attachmentName is the VolumeAttachment the attach/detach controller
// makes for a CSI volume on the node: csi-<sha256(handle+driver+node)>.
func attachmentName(handle, driver string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+nodeName)))
}

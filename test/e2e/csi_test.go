package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images/csihostdir"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The tests' CSI driver (test/images/csihostdir) runs as a host process
// next to hostlet — here in the test's own process, root on the host — so
// its bind mounts are in the host's mount namespace, where hostlet and the
// containers' mounts see them, as a node plugin pod's are with
// Bidirectional propagation. It registers through <root-dir>/plugins_registry
// as the node-driver-registrar does.

// csiDriverName is a driver name of the test's own (a DNS subdomain).
func csiDriverName(ns string) string {
	return strings.TrimPrefix(ns, "e2e-") + ".hostdir.hostlet.test"
}

// persistentCSIDriver is a test's namespace and a driver of persistent
// volumes for it: its CSIDriver object (attachRequired as attach) and the
// driver serving on the node, with its state in a temp dir.
func persistentCSIDriver(t *testing.T, attach bool) (ns, name, state string, d *csihostdir.Driver) {
	t.Helper()
	ns = cluster.NewNamespace(t)
	name = csiDriverName(ns)
	state = t.TempDir()
	csiDriverObject(t, name, attach, "", storagev1.VolumeLifecyclePersistent)
	d, _ = startCSIDriver(t, name, state)
	return ns, name, state, d
}

// csiDriverObject creates the driver's CSIDriver object (deleted when the
// test ends), with a token request for audience unless it is "".
func csiDriverObject(t *testing.T, name string, attach bool, audience string, modes ...storagev1.VolumeLifecycleMode) {
	t.Helper()
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &attach, PodInfoOnMount: ptr(true), VolumeLifecycleModes: modes}}
	if audience != "" {
		d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: audience}}
	}
	if _, err := cluster.Client().StorageV1().CSIDrivers().Create(ctxT(t), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().StorageV1().CSIDrivers().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// csiClaimPod makes the PV pv (class, if any) of driver's volume handle,
// the claim "data" bound to it in ns, and returns (not created) a pod
// using the claim.
func csiClaimPod(t *testing.T, ns, driver, pv, class, handle string) *v1.Pod {
	t.Helper()
	persistentVolume(t, pv, class, v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}, nil)
	claim(t, ns, "data", class, pv)
	return claimPodSpec(ns, "app", "data", false)
}

// startCSIDriver runs the driver until stop (or the test's end) and waits
// for the node to accept its registration.
func startCSIDriver(t *testing.T, name, state string) (d *csihostdir.Driver, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	d, err = csihostdir.Start(ctx, csihostdir.Config{Name: name, NodeID: nodeName, StateDir: state, Stage: true, MaxVolumes: 7,
		Endpoint:    filepath.Join(node.RootDir(), "plugins", name, "csi.sock"),
		RegistryDir: filepath.Join(node.RootDir(), "plugins_registry")})
	if err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, d)
	return d, cancel
}

// awaitRegistration waits for the node to accept the driver's
// registration.
func awaitRegistration(t *testing.T, d *csihostdir.Driver) {
	t.Helper()
	select {
	case r := <-d.Registered():
		if !r.Registered {
			t.Fatalf("registration refused: %s", r.Error)
		}
	case <-ctxT(t).Done():
		t.Fatal("the node never answered the driver's registration")
	}
}

// csiCalls are the driver's calls of method.
func csiCalls(t *testing.T, state, method string) []csihostdir.Call {
	t.Helper()
	calls, err := csihostdir.Calls(state)
	if err != nil {
		t.Fatal(err)
	}
	var out []csihostdir.Call
	for _, c := range calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// A CSI driver registers: the node's CSINode gets its entry (node ID,
// topology key, allocatable count), the Node its nodeid annotation and
// topology label. A pod with a PVC bound to a static PV of the driver and
// an inline ephemeral volume of it starts: the PV is staged at the
// kubelet's global path and published to the pod's, with vol_data.json and
// the pod's identity and the token the driver asks for in the volume
// context; what the pod writes is in the driver's state dir, and the
// driver's NodeGetVolumeStats is in /stats/summary and the
// kubelet_volume_stats_* metrics. Deleting the pod unpublishes both and unstages the
// PV, leaving nothing mounted; the driver going away deregisters it.
func TestCSIVolumes(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	name := csiDriverName(ns)
	state := t.TempDir()
	csiDriverObject(t, name, false, "hostlet-csi-test", storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral)
	_, stop := startCSIDriver(t, name, state)

	pollUntil(t, time.Minute, "the driver in the node's CSINode", func() bool {
		cn, err := cluster.Client().StorageV1().CSINodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == name {
				if d.NodeID != nodeName || !slices.Equal(d.TopologyKeys, []string{csihostdir.TopologyKey}) ||
					d.Allocatable == nil || d.Allocatable.Count == nil || *d.Allocatable.Count != 7 {
					t.Fatalf("CSINode entry %+v", d)
				}
				return true
			}
		}
		return false
	})
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	_ = json.Unmarshal([]byte(n.Annotations["csi.volume.kubernetes.io/nodeid"]), &ids)
	if ids[name] != nodeName {
		t.Errorf("nodeid annotation %q, want %s: %s", n.Annotations["csi.volume.kubernetes.io/nodeid"], name, nodeName)
	}
	if n.Labels[csihostdir.TopologyKey] != nodeName {
		t.Errorf("topology label %q", n.Labels[csihostdir.TopologyKey])
	}

	pv := ns + "-csi"
	persistentVolume(t, pv, "", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
		Driver: name, VolumeHandle: "vol1", VolumeAttributes: map[string]string{"from": "pv"}}}, nil)
	claim(t, ns, "data", "", pv)
	pod := claimPodSpec(ns, "app", "data", false)
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: name, VolumeAttributes: map[string]string{"from": "inline"}}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, mount("eph", "/eph"))
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo persistent > /data/f && echo ephemeral > /eph/g")
	writeFails(t, ns, pod.Name, "/ro")
	if b, err := os.ReadFile(filepath.Join(csihostdir.VolumeDir(state, "vol1"), "f")); err != nil || string(b) != "persistent\n" {
		t.Errorf("in the driver's volume: %q %v", b, err)
	}
	ephID := inlineHandle(t, state)
	if b, err := os.ReadFile(filepath.Join(csihostdir.EphemeralDir(state, ephID), "g")); err != nil || string(b) != "ephemeral\n" {
		t.Errorf("in the driver's ephemeral volume: %q %v", b, err)
	}
	podDir := filepath.Join(node.RootDir(), "pods", string(running.UID))
	volDir := filepath.Join(podDir, "volumes", "kubernetes.io~csi", pv)
	var vd map[string]string
	if b, err := os.ReadFile(filepath.Join(volDir, "vol_data.json")); err != nil || json.Unmarshal(b, &vd) != nil ||
		vd["driverName"] != name || vd["volumeHandle"] != "vol1" || vd["specVolID"] != pv || vd["volumeLifecycleMode"] != "Persistent" {
		t.Errorf("vol_data.json: %v %v", vd, err)
	}
	stage := csiCalls(t, state, "NodeStageVolume")
	if len(stage) != 1 || !strings.HasPrefix(stage[0].Staging, filepath.Join(node.RootDir(), "plugins", "kubernetes.io", "csi", name)+"/") ||
		filepath.Base(stage[0].Staging) != "globalmount" {
		t.Errorf("NodeStageVolume calls %+v", stage)
	}
	for _, c := range csiCalls(t, state, "NodePublishVolume") {
		// The token the driver asked for, of the pod's service account.
		var tokens map[string]struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal([]byte(c.Context["csi.storage.k8s.io/serviceAccount.tokens"]), &tokens); err != nil ||
			strings.Count(tokens["hostlet-csi-test"].Token, ".") != 2 {
			t.Errorf("NodePublishVolume of %s without the pod's token: %v %v", c.Volume, tokens, err)
		}
		switch c.Volume {
		case "vol1":
			if c.Target != filepath.Join(volDir, "mount") || len(stage) == 0 || c.Staging != stage[0].Staging || c.Context["from"] != "pv" ||
				c.Context["csi.storage.k8s.io/pod.name"] != pod.Name || c.Context["csi.storage.k8s.io/ephemeral"] != "false" {
				t.Errorf("NodePublishVolume of the PV %+v", c)
			}
		default:
			if c.Target != filepath.Join(podDir, "volumes", "kubernetes.io~csi", "eph", "mount") || c.Staging != "" ||
				c.Context["from"] != "inline" || c.Context["csi.storage.k8s.io/ephemeral"] != "true" ||
				c.Context["csi.storage.k8s.io/pod.uid"] != string(running.UID) {
				t.Errorf("NodePublishVolume of the inline volume %+v", c)
			}
		}
	}

	// The driver's NodeGetVolumeStats in /stats/summary (the claim's
	// volume with its claim) and the kubelet_volume_stats_* metrics.
	_, statsToken := kubeletIdentity(t, ns, "stats", "get")
	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")
	var vols []statsv1alpha1.VolumeStats
	for _, ps := range summary(t, statsToken).Pods {
		if ps.PodRef.UID == string(running.UID) {
			vols = ps.VolumeStats
		}
	}
	byName := map[string]statsv1alpha1.VolumeStats{}
	for _, v := range vols {
		byName[v.Name] = v
	}
	if v, ok := byName["data"]; !ok || v.PVCRef == nil || v.PVCRef.Name != "data" || v.PVCRef.Namespace != ns ||
		v.CapacityBytes == nil || *v.CapacityBytes == 0 || v.Inodes == nil || *v.Inodes == 0 {
		t.Errorf("the claim's volume stats: %s", js(vols))
	}
	if v, ok := byName["eph"]; !ok || v.PVCRef != nil || v.CapacityBytes == nil {
		t.Errorf("the inline volume's stats: %s", js(vols))
	}
	if v, ok := sample(scrape(t, "/metrics", metricsToken), "kubelet_volume_stats_capacity_bytes",
		map[string]string{"namespace": ns, "persistentvolumeclaim": "data"}); !ok || v == 0 {
		t.Errorf("kubelet_volume_stats_capacity_bytes of the claim: %v %v", v, ok)
	}

	removePod(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the volumes unpublished and unstaged", func() bool {
		unpublished := map[string]bool{}
		for _, c := range csiCalls(t, state, "NodeUnpublishVolume") {
			unpublished[c.Volume] = true
		}
		return unpublished["vol1"] && unpublished[ephID] && len(csiCalls(t, state, "NodeUnstageVolume")) >= 1
	})
	pollUntil(t, time.Minute, "nothing left mounted of the pod", func() bool {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(podDir))
		return err == nil && len(mounts) == 0
	})
	if mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(node.RootDir(), "plugins", "kubernetes.io", "csi", name))); err != nil || len(mounts) != 0 {
		t.Errorf("staging mounts left: %v %v", mounts, err)
	}
	for _, c := range append(csiCalls(t, state, "NodeUnpublishVolume"), csiCalls(t, state, "NodeUnstageVolume")...) {
		if c.Error != "" {
			t.Errorf("%s failed: %s", c.Method, c.Error)
		}
	}
	if b, err := os.ReadFile(filepath.Join(csihostdir.VolumeDir(state, "vol1"), "f")); err != nil || string(b) != "persistent\n" {
		t.Errorf("the PV's data after the pod: %q %v", b, err)
	}
	if _, err := os.Stat(csihostdir.EphemeralDir(state, ephID)); !os.IsNotExist(err) {
		t.Errorf("the inline volume outlived its pod: %v", err)
	}

	// The driver goes: its CSINode entry and annotation go with it.
	stop()
	pollUntil(t, time.Minute, "the driver out of the CSINode and the annotation", func() bool {
		cn, err := cluster.Client().StorageV1().CSINodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
		if err != nil || slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name }) {
			return false
		}
		n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
		return err == nil && !strings.Contains(n.Annotations["csi.volume.kubernetes.io/nodeid"], name)
	})
}

// inlineHandle is the one ephemeral volume the driver has.
func inlineHandle(t *testing.T, state string) string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(state, "ephemeral"))
	if err != nil || len(es) != 1 {
		t.Fatalf("ephemeral volumes of the driver: %v %v", es, err)
	}
	return es[0].Name()
}

// A pod whose CSI driver is not registered waits in ContainerCreating with
// the kubelet's FailedMount event, and starts once the driver registers.
func TestCSIDriverNotRegistered(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	name := csiDriverName(ns)
	state := t.TempDir()
	csiDriverObject(t, name, false, "", storagev1.VolumeLifecycleEphemeral)
	pod := busybox(ns, "waits", "sleep", "3600")
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.Spec.NodeName = nodeName
	pod.Spec.Volumes = []v1.Volume{{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: name}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("eph", "/eph")}
	cluster.CreatePod(t, pod)
	want := `MountVolume.SetUp failed for volume "eph" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name ` +
		name + ` not found in the list of registered CSI drivers`
	awaitEvent(t, ns, pod.Name, func(reason, msg string) bool { return reason == "FailedMount" && msg == want })
	// Its status (written apart from the event) says so too.
	pollUntil(t, time.Minute, "the pod Pending in ContainerCreating", func() bool {
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == v1.PodPending && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].State.Waiting != nil && p.Status.ContainerStatuses[0].State.Waiting.Reason == "ContainerCreating"
	})
	_, _ = startCSIDriver(t, name, state)
	waitReady(t, ns, pod.Name)
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo late > /eph/f")
	if b, err := os.ReadFile(filepath.Join(csihostdir.EphemeralDir(state, inlineHandle(t, state)), "f")); err != nil || string(b) != "late\n" {
		t.Errorf("in the driver's volume: %q %v", b, err)
	}
	removePod(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the volume unpublished", func() bool { return len(csiCalls(t, state, "NodeUnpublishVolume")) >= 1 })
}

// A driver whose CSIDriver says attachRequired: the attach/detach
// controller makes the volume's VolumeAttachment and the pod waits until it
// is attached (the test is the external-attacher here), woken by the Node
// listing it attached as the kubelet's reconciler is: no failed setup (a
// WaitForAttach FailedMount) meanwhile, whether the VolumeAttachment was
// made yet or not; the volume is in the node's volumesInUse while the pod
// uses it, its attachment metadata reaches NodeStage and NodePublish, and
// once the pod is gone and the volume is no longer in use the controller
// detaches it.
func TestCSIAttachRequired(t *testing.T) {
	skipIfNoCluster(t)
	ns, name, state, _ := persistentCSIDriver(t, true)
	pv := ns + "-att"
	pod := csiClaimPod(t, ns, name, pv, "", "vol-a")
	cluster.CreatePod(t, pod)
	inUse := v1.UniqueVolumeName("kubernetes.io/csi/" + name + "^vol-a")
	pollUntil(t, time.Minute, "the volume in the node's volumesInUse", func() bool {
		n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
		return err == nil && slices.Contains(n.Status.VolumesInUse, inUse)
	})
	// The controller's VolumeAttachment, attached as the external-attacher
	// would.
	var va *storagev1.VolumeAttachment
	pollUntil(t, time.Minute, "the attach/detach controller's VolumeAttachment", func() bool {
		list, err := cluster.Client().StorageV1().VolumeAttachments().List(ctxT(t), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for i := range list.Items {
			if a := &list.Items[i]; a.Spec.Attacher == name && a.Spec.NodeName == nodeName {
				va = a
				return true
			}
		}
		return false
	})
	va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"device": "sim0"}}
	if _, err := cluster.Client().StorageV1().VolumeAttachments().UpdateStatus(ctxT(t), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, pod.Name)
	for _, e := range events(t, ns, pod.Name) {
		if strings.Contains(e, "MountVolume.WaitForAttach failed") {
			t.Errorf("the pod failed its setup while the volume was not attached: %s", e)
		}
	}
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo attached > /data/f")
	for _, c := range append(csiCalls(t, state, "NodeStageVolume"), csiCalls(t, state, "NodePublishVolume")...) {
		if c.Publish["device"] != "sim0" {
			t.Errorf("%s without the attachment's metadata: %+v", c.Method, c)
		}
	}
	removePod(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the volume out of volumesInUse", func() bool {
		n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
		return err == nil && !slices.Contains(n.Status.VolumesInUse, inUse)
	})
	if len(csiCalls(t, state, "NodeUnstageVolume")) == 0 {
		t.Errorf("NodeUnstageVolume calls: %+v", csiCalls(t, state, "NodeUnstageVolume"))
	}
	pollUntil(t, 2*time.Minute, "the controller detaching the volume", func() bool {
		a, err := cluster.Client().StorageV1().VolumeAttachments().Get(ctxT(t), va.Name, metav1.GetOptions{})
		return err != nil || a.DeletionTimestamp != nil
	})
}

// hostlet killed (-9) with a CSI volume published: restarted, it finds
// the driver's registration again and leaves the running pod's volume as it
// is (no second publish); killed again and the pod force-deleted while it
// is down, the restarted hostlet unpublishes and unstages the volume from
// what vol_data.json says, leaving nothing mounted.
func TestCSIHostletRestart(t *testing.T) {
	skipIfNoCluster(t)
	ns, name, state, d := persistentCSIDriver(t, false)
	pv := ns + "-rs"
	pod := csiClaimPod(t, ns, name, pv, "", "vol-r")
	pod.Spec.NodeName = nodeName
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo before > /data/f")

	node.Kill()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// Its socket still in plugins_registry, the driver is asked again.
	awaitRegistration(t, d)
	if out := execIn(t, ns, pod.Name, "c", "cat", "/data/f"); out != "before\n" {
		t.Errorf("after the restart the pod reads %q", out)
	}
	if n := len(csiCalls(t, state, "NodePublishVolume")); n != 1 {
		t.Errorf("NodePublishVolume called %d times, want once", n)
	}

	node.Kill()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, d)
	pollUntil(t, 2*time.Minute, "the volume unpublished and unstaged", func() bool {
		return len(csiCalls(t, state, "NodeUnpublishVolume")) >= 1 && len(csiCalls(t, state, "NodeUnstageVolume")) >= 1
	})
	podDir := filepath.Join(node.RootDir(), "pods", string(running.UID))
	pollUntil(t, time.Minute, "nothing left mounted of the pod", func() bool {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(podDir))
		return err == nil && len(mounts) == 0
	})
	if b, err := os.ReadFile(filepath.Join(csihostdir.VolumeDir(state, "vol-r"), "f")); err != nil || string(b) != "before\n" {
		t.Errorf("the volume's data: %q %v", b, err)
	}
}

// expandableClass is a StorageClass of the driver that allows expansion,
// deleted when the test ends.
func expandableClass(t *testing.T, class, driver string) {
	t.Helper()
	if _, err := cluster.Client().StorageV1().StorageClasses().Create(ctxT(t), &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: driver, AllowVolumeExpansion: ptr(true),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().StorageV1().StorageClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
}

// A claim of an expandable class grows while its pod runs: the test is
// the external-resizer (the PV's capacity set, the claim marked
// NodeResizePending), and the node, watching the claim (the chart's
// rbac.volumeExpansion granted), calls NodeExpandVolume for the new size
// as the claim changes, then records the new capacity in the claim's
// status and tells the claim FileSystemResizeSuccessful, as the kubelet's
// online expansion.
func TestCSIOnlineExpansion(t *testing.T) {
	skipIfNoCluster(t)
	claimWatchRBAC(t)
	ns, name, state, _ := persistentCSIDriver(t, false)
	class := ns + "-grow"
	expandableClass(t, class, name)
	pvName := ns + "-grow"
	pod := csiClaimPod(t, ns, name, pvName, class, "vol-g")
	cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)

	c := cluster.Client().CoreV1()
	two := resource.MustParse("2Gi")
	pvc, err := c.PersistentVolumeClaims(ns).Get(ctxT(t), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = two
	if _, err := c.PersistentVolumeClaims(ns).Update(ctxT(t), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The external-resizer's order: the claim's allocated size, the PV,
	// then NodeResizePending. A PV grown before the allocated size is
	// what a resizer older than RecoverVolumeExpansionFailure does, and
	// the node expands for it at once (a second NodeExpandVolume when
	// NodeResizePending follows).
	markClaim(t, ns, "data", two, v1.PersistentVolumeClaimControllerResizeInProgress)
	pv, err := c.PersistentVolumes().Get(ctxT(t), pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = two
	if _, err := c.PersistentVolumes().Update(ctxT(t), pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	markClaim(t, ns, "data", two, v1.PersistentVolumeClaimNodeResizePending)
	// The node's part follows the claim's change.
	pollUntil(t, 3*time.Minute, "the claim's status at the new size", func() bool {
		got, err := c.PersistentVolumeClaims(ns).Get(ctxT(t), "data", metav1.GetOptions{})
		capacity := got.Status.Capacity[v1.ResourceStorage]
		return err == nil && capacity.Cmp(two) == 0 && len(got.Status.AllocatedResourceStatuses) == 0
	})
	calls := csiCalls(t, state, "NodeExpandVolume")
	if len(calls) != 1 || calls[0].Bytes != two.Value() || calls[0].Error != "" {
		t.Errorf("NodeExpandVolume calls %+v", calls)
	}
	pollUntil(t, time.Minute, "the claim's FileSystemResizeSuccessful event", func() bool {
		evs, err := c.Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=data"})
		return err == nil && slices.ContainsFunc(evs.Items, func(e v1.Event) bool {
			return e.Reason == "FileSystemResizeSuccessful" && e.Message == fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pvName, nodeName)
		})
	})
	removePod(t, ns, pod.Name)
}

// markClaim is the resizer's write of the claim's status: its allocated
// size and resize status, retried over the PV controller's own updates of
// the claim.
func markClaim(t *testing.T, ns, claim string, size resource.Quantity, st v1.ClaimResourceStatus) {
	t.Helper()
	c := cluster.Client().CoreV1()
	pollUntil(t, time.Minute, "the claim marked "+string(st), func() bool {
		pvc, err := c.PersistentVolumeClaims(ns).Get(ctxT(t), claim, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != v1.ClaimBound {
			return false
		}
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: size}
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: st}
		_, err = c.PersistentVolumeClaims(ns).UpdateStatus(ctxT(t), pvc, metav1.UpdateOptions{})
		return err == nil
	})
}

// claimWatchRBAC lets nodes list and watch claims, as the chart's
// rbac.volumeExpansion does (the Node authorizer lets a node only get one).
func claimWatchRBAC(t *testing.T) {
	grantNodes(t, "e2e:volume-expansion", "persistentvolumeclaims")
}

// A pod whose volume does not tear down (the driver's NodeUnpublishVolume
// fails) stays in the API, Terminating, with a FailedUnmount warning that
// gives the failure, while the node retries with back-off; once the driver
// unpublishes, the pod's volume is unpublished and unstaged, nothing of it
// is left mounted, and then the pod is removed (the kubelet deletes a pod
// only once its volumes are torn down).
func TestVolumeTeardownHoldsDeletion(t *testing.T) {
	skipIfNoCluster(t)
	ns, name, state, d := persistentCSIDriver(t, false)
	pv := ns + "-held"
	pod := csiClaimPod(t, ns, name, pv, "", "vol-h")
	pod.Spec.NodeName = nodeName
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)

	d.FailUnpublish(true)
	// A grace period, so that the API keeps the pod for the node to
	// delete (grace 0 would remove it at once).
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(1))}); err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, ns, pod.Name, func(reason, msg string) bool {
		return reason == "FailedUnmount" && strings.Contains(msg, "UnmountVolume.TearDown failed for volume") &&
			strings.Contains(msg, "injected NodeUnpublishVolume failure")
	})
	// Retried: a second failed unpublish, and the pod still there,
	// Terminating, its final status written.
	pollUntil(t, time.Minute, "NodeUnpublishVolume retried", func() bool {
		return len(csiCalls(t, state, "NodeUnpublishVolume")) >= 2
	})
	held, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
	if err != nil || held.UID != running.UID || held.DeletionTimestamp == nil {
		t.Fatalf("pod while its volume resists teardown: %v (err %v), want it Terminating", held, err)
	}
	if len(csiCalls(t, state, "NodeUnstageVolume")) != 0 {
		t.Error("unstaged while still published")
	}

	d.FailUnpublish(false)
	// The next retry comes after the back-off reached so far (at most
	// the kubelet's 2m2s).
	pollUntil(t, 3*time.Minute, "the pod removed once its volume is torn down", func() bool {
		_, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	calls := csiCalls(t, state, "NodeUnpublishVolume")
	if last := calls[len(calls)-1]; last.Error != "" {
		t.Errorf("pod removed before a successful NodeUnpublishVolume: %+v", last)
	}
	if n := len(csiCalls(t, state, "NodeUnstageVolume")); n != 1 {
		t.Errorf("NodeUnstageVolume called %d times before the pod's removal, want once", n)
	}
	podDir := filepath.Join(node.RootDir(), "pods", string(running.UID))
	if mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(podDir)); err != nil || len(mounts) != 0 {
		t.Errorf("left mounted of the pod: %v %v", mounts, err)
	}
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod directory left: %v", err)
	}
}

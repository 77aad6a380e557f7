package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images/csihostdir"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// csiBlockClaim makes a Block PV of driver's volume handle (size bytes,
// which the test driver makes its loop device's file of) and the Block
// claim "blk" bound to it in ns, both of storage class class ("": none).
func csiBlockClaim(t *testing.T, ns, driver, pv, handle, class string, size int64) {
	t.Helper()
	block := v1.PersistentVolumeBlock
	created := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle,
			VolumeAttributes: map[string]string{"size": strconv.FormatInt(size, 10)}}},
		VolumeMode:       &block,
		StorageClassName: class,
		Capacity:         v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)},
		AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
	}}
	if _, err := cluster.Client().CoreV1().PersistentVolumes().Create(ctxT(t), created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().CoreV1().PersistentVolumes().Delete(t.Context(), pv, metav1.DeleteOptions{})
	})
	if _, err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctxT(t), &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "blk"}, Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class, VolumeName: pv, VolumeMode: &block,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// loopsOver are the loop devices attached to file.
func loopsOver(t *testing.T, file string) string {
	t.Helper()
	out, err := exec.Command("losetup", "-j", file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -j: %v %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// A CSI PV with volumeMode Block reaches pods through volumeDevices as the
// kubelet's csiBlockMapper maps it: NodeStageVolume and NodePublishVolume
// with a block capability to plugins/kubernetes.io/csi/volumeDevices/
// staging/<pv> and publish/<pv>/<uid> (where the driver bind-mounts its
// loop device), vol_data.json in <pv>/data, the published device
// bind-mounted on <pv>/dev/<uid> and symlinked from the pod's
// volumeDevices/kubernetes.io~csi/<pv>. Two pods map it at once (one
// read-only); what one writes the other reads, and the backing file has
// it. The driver's NodeGetVolumeStats of the mapping is in /stats/summary
// and the kubelet_volume_stats_* metrics. The first pod gone unpublishes its mapping only; the last one gone
// unstages the volume (the loop device detached) and leaves no path of it.
func TestCSIBlockVolume(t *testing.T) {
	skipIfNoCluster(t)
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	ns, name, state, _ := persistentCSIDriver(t, false)
	pv := ns + "-cblk"
	csiBlockClaim(t, ns, name, pv, "blk1", "", 8<<20)
	file := csihostdir.BlockFile(state, "blk1")
	t.Cleanup(func() {
		_ = exec.Command("sh", "-c", "losetup -j "+file+" | cut -d: -f1 | xargs -r -n1 losetup -d").Run()
	})

	writer := blockPodSpec(ns, "writer", "blk", false)
	writer.Spec.NodeName = nodeName
	cluster.CreatePod(t, writer)
	w := waitReady(t, ns, writer.Name)

	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		calls := csiCalls(t, state, m)
		if len(calls) != 1 || !calls[0].Block {
			t.Fatalf("%s calls: %+v", m, calls)
		}
	}
	root := node.RootDir()
	blockDir := filepath.Join(root, "plugins", "kubernetes.io", "csi", "volumeDevices")
	if c := csiCalls(t, state, "NodeStageVolume")[0]; c.Staging != filepath.Join(blockDir, "staging", pv) {
		t.Errorf("staged at %s", c.Staging)
	}
	publish := filepath.Join(blockDir, "publish", pv, string(w.UID))
	if c := csiCalls(t, state, "NodePublishVolume")[0]; c.Target != publish {
		t.Errorf("published at %s, want %s", c.Target, publish)
	}
	if b, err := os.ReadFile(filepath.Join(blockDir, pv, "data", "vol_data.json")); err != nil || !bytes.Contains(b, []byte(`"volumeHandle":"blk1"`)) {
		t.Errorf("vol_data.json: %s %v", b, err)
	}
	if ok, err := mountinfo.Mounted(filepath.Join(blockDir, pv, "dev", string(w.UID))); err != nil || !ok {
		t.Errorf("the global map path's bind mount: %v %v", ok, err)
	}
	link := filepath.Join(root, "pods", string(w.UID), "volumeDevices", "kubernetes.io~csi", pv)
	if target, err := os.Readlink(link); err != nil || target != publish {
		t.Errorf("pod device map path %s -> %q (%v)", link, target, err)
	}
	loop := loopsOver(t, file)
	if loop == "" {
		t.Fatal("no loop device over the volume's file")
	}
	// The driver's NodeGetVolumeStats of the pod's mapping (asked on the
	// global map path, as the kubelet's block mapper asks) is in
	// /stats/summary, with its claim, and the kubelet_volume_stats_*
	// metrics.
	_, statsToken := kubeletIdentity(t, ns, "stats", "get")
	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")
	var vols []statsv1alpha1.VolumeStats
	for _, ps := range summary(t, statsToken).Pods {
		if ps.PodRef.UID == string(w.UID) {
			vols = ps.VolumeStats
		}
	}
	i := slices.IndexFunc(vols, func(v statsv1alpha1.VolumeStats) bool { return v.Name == "data" })
	if i < 0 || vols[i].PVCRef == nil || vols[i].PVCRef.Name != "blk" || vols[i].PVCRef.Namespace != ns ||
		vols[i].CapacityBytes == nil || *vols[i].CapacityBytes == 0 {
		t.Errorf("the block volume's stats: %s", js(vols))
	}
	if v, ok := sample(scrape(t, "/metrics", metricsToken), "kubelet_volume_stats_capacity_bytes",
		map[string]string{"namespace": ns, "persistentvolumeclaim": "blk"}); !ok || v == 0 {
		t.Errorf("kubelet_volume_stats_capacity_bytes of the block claim: %v %v", v, ok)
	}

	execIn(t, ns, writer.Name, "c", "sh", "-c", "printf from-pod | dd of=/dev/xvda bs=512 seek=1 conv=notrunc,fsync 2>/dev/null")
	reader := blockPodSpec(ns, "reader", "blk", true)
	reader.Spec.NodeName = nodeName
	cluster.CreatePod(t, reader)
	r := waitReady(t, ns, reader.Name)
	if out := execIn(t, ns, reader.Name, "c", "sh", "-c", "dd if=/dev/xvda bs=1 skip=512 count=8 2>/dev/null"); out != "from-pod" {
		t.Errorf("the second pod reads %q", out)
	}
	if out, err := cluster.Kubectl(ctxT(t), "-n", ns, "exec", reader.Name, "-c", "c", "--", "sh", "-c",
		"printf x | dd of=/dev/xvda conv=notrunc"); err == nil {
		t.Errorf("the read-only pod wrote the device: %q", out)
	}
	if n := len(csiCalls(t, state, "NodeStageVolume")); n != 1 {
		t.Errorf("staged %d times for two pods", n)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b[512:520], []byte("from-pod")) {
		t.Errorf("the backing file at 512: %v", err)
	}

	removePod(t, ns, writer.Name)
	pollUntil(t, time.Minute, "the first pod's mapping gone", func() bool {
		_, err := os.Lstat(filepath.Join(root, "pods", string(w.UID)))
		return os.IsNotExist(err)
	})
	if n := len(csiCalls(t, state, "NodeUnstageVolume")); n != 0 {
		t.Errorf("unstaged while the second pod maps it")
	}
	if _, err := os.Lstat(publish); !os.IsNotExist(err) {
		t.Errorf("the first pod's publish path is left: %v", err)
	}
	if out := execIn(t, ns, reader.Name, "c", "sh", "-c", "dd if=/dev/xvda bs=1 skip=512 count=8 2>/dev/null"); out != "from-pod" {
		t.Errorf("after the first pod the second reads %q", out)
	}

	removePod(t, ns, reader.Name)
	pollUntil(t, time.Minute, "the volume unstaged and its paths gone", func() bool {
		_, pErr := os.Lstat(filepath.Join(root, "pods", string(r.UID)))
		_, vErr := os.Lstat(filepath.Join(blockDir, pv))
		_, sErr := os.Lstat(filepath.Join(blockDir, "staging", pv))
		_, uErr := os.Lstat(filepath.Join(blockDir, "publish", pv))
		return os.IsNotExist(pErr) && os.IsNotExist(vErr) && os.IsNotExist(sErr) && os.IsNotExist(uErr)
	})
	if n := len(csiCalls(t, state, "NodeUnstageVolume")); n != 1 {
		t.Errorf("NodeUnstageVolume called %d times", n)
	}
	if l := loopsOver(t, file); l != "" {
		t.Errorf("loop device left: %s", l)
	}
	if mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(blockDir)); err != nil || len(mounts) != 0 {
		t.Errorf("mounts left under %s: %d %v", blockDir, len(mounts), err)
	}
}

// A mapped Block claim grows while its pod runs, as a mounted one does
// (TestCSIOnlineExpansion): the test is the external-resizer (the
// volume's file grown, the PV's capacity set, the claim marked
// NodeResizePending) and the node, watching the claim, calls
// NodeExpandVolume as the kubelet does for a block volume: the device's
// publish path, the block staging path; the driver's loop device then
// has the new size and the claim's status says it.
func TestCSIBlockOnlineExpansion(t *testing.T) {
	skipIfNoCluster(t)
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	claimWatchRBAC(t)
	ns, name, state, _ := persistentCSIDriver(t, false)
	// Only a claim of a class that allows expansion may grow (its PV is
	// static: the class's provisioner is never called).
	class := ns + "-gblk"
	expandableClass(t, class, name)
	pvName := ns + "-gblk"
	csiBlockClaim(t, ns, name, pvName, "blkg", class, 8<<20)
	file := csihostdir.BlockFile(state, "blkg")
	t.Cleanup(func() {
		_ = exec.Command("sh", "-c", "losetup -j "+file+" | cut -d: -f1 | xargs -r -n1 losetup -d").Run()
	})
	pod := blockPodSpec(ns, "grower", "blk", false)
	pod.Spec.NodeName = nodeName
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)

	c := cluster.Client().CoreV1()
	bigger := resource.NewQuantity(16<<20, resource.BinarySI)
	pvc, err := c.PersistentVolumeClaims(ns).Get(ctxT(t), "blk", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = *bigger
	if _, err := c.PersistentVolumeClaims(ns).Update(ctxT(t), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The resizer's steps: the claim's resize in progress, the volume
	// grown (ControllerExpandVolume) and the PV's capacity set, the
	// claim handed to the node.
	markClaim(t, ns, "blk", *bigger, v1.PersistentVolumeClaimControllerResizeInProgress)
	if err := os.Truncate(file, bigger.Value()); err != nil {
		t.Fatal(err)
	}
	pv, err := c.PersistentVolumes().Get(ctxT(t), pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = *bigger
	if _, err := c.PersistentVolumes().Update(ctxT(t), pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	markClaim(t, ns, "blk", *bigger, v1.PersistentVolumeClaimNodeResizePending)
	pollUntil(t, 3*time.Minute, "the claim's status at the new size", func() bool {
		got, err := c.PersistentVolumeClaims(ns).Get(ctxT(t), "blk", metav1.GetOptions{})
		capacity := got.Status.Capacity[v1.ResourceStorage]
		return err == nil && capacity.Cmp(*bigger) == 0 && len(got.Status.AllocatedResourceStatuses) == 0
	})
	blockDir := filepath.Join(node.RootDir(), "plugins", "kubernetes.io", "csi", "volumeDevices")
	calls := csiCalls(t, state, "NodeExpandVolume")
	if len(calls) != 1 || calls[0].Bytes != bigger.Value() || calls[0].Error != "" ||
		calls[0].Target != filepath.Join(blockDir, "publish", pvName, string(running.UID)) ||
		calls[0].Staging != filepath.Join(blockDir, "staging", pvName) {
		t.Errorf("NodeExpandVolume calls %+v", calls)
	}
	loop := strings.TrimPrefix(strings.SplitN(loopsOver(t, file), ":", 2)[0], "/dev/")
	if b, err := os.ReadFile(filepath.Join("/sys/block", loop, "size")); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(16<<20/512) {
		t.Errorf("%s's size in sectors: %q %v", loop, b, err)
	}
	removePod(t, ns, pod.Name)
}

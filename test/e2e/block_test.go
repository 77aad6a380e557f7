package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// loopDevice attaches a loop device over a new file of size bytes in a
// test temp dir, starting with head, and detaches it when the test ends.
func loopDevice(t *testing.T, head []byte, size int64) (dev, backing string) {
	t.Helper()
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	backing = filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(backing, head, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", backing).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: %v %s", err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v %s", dev, err, out)
		}
	})
	return dev, backing
}

// blockPodSpec is a sleeping busybox with claim's block volume at
// /dev/xvda (volumeDevices).
func blockPodSpec(ns, name, claim string, readOnly bool) *v1.Pod {
	pod := busybox(ns, name, "sleep", "3600")
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	return pod
}

// A local PV with volumeMode Block whose path is a block device (a loop
// device over a file here) reaches a pod through volumeDevices as the
// kubelet maps it: bind-mounted on the global map path, symlinked from the
// pod's device map path, a device node at the devicePath the container
// reads and writes (what it writes is in the backing file); a read-only
// claim gives read access only; a Block claim in volumeMounts gets the
// kubelet's error. Once the pods are gone no map path is left.
func TestBlockVolumeLocal(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	dev, backing := loopDevice(t, []byte("from-host"), 8<<20)

	pv := ns + "-blk"
	block := v1.PersistentVolumeBlock
	created := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dev}},
		VolumeMode:             &block,
		Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("8Mi")},
		AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}},
	}}
	if _, err := cluster.Client().CoreV1().PersistentVolumes().Create(ctxT(t), created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().CoreV1().PersistentVolumes().Delete(context.Background(), pv, metav1.DeleteOptions{})
	})
	empty := ""
	if _, err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctxT(t), &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "blk"}, Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &empty, VolumeName: pv, VolumeMode: &block,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("8Mi")}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pod := blockPodSpec(ns, "writer", "blk", false)
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)
	if running.Spec.NodeName != nodeName {
		t.Fatalf("pod on %q", running.Spec.NodeName)
	}
	global := filepath.Join(node.RootDir(), "plugins", "kubernetes.io~local-volume", "volumeDevices", pv)
	if fi, err := os.Lstat(filepath.Join(global, string(running.UID))); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Errorf("no device bound on the global map path %s/%s: %v", global, running.UID, err)
	}
	link := filepath.Join(node.RootDir(), "pods", string(running.UID), "volumeDevices", "kubernetes.io~local-volume", pv)
	if target, err := os.Readlink(link); err != nil || target != dev {
		t.Errorf("pod device map path %s -> %q (%v), want %s", link, target, err, dev)
	}
	if out := execIn(t, ns, pod.Name, "c", "sh", "-c", "dd if=/dev/xvda bs=9 count=1 2>/dev/null"); out != "from-host" {
		t.Errorf("the pod reads %q from the device", out)
	}
	execIn(t, ns, pod.Name, "c", "sh", "-c", "printf from-pod | dd of=/dev/xvda bs=512 seek=1 conv=notrunc,fsync 2>/dev/null")
	b, err := os.ReadFile(backing)
	if err != nil || !bytes.Equal(b[512:520], []byte("from-pod")) {
		t.Errorf("the backing file at 512: %q %v", b[512:520], err)
	}
	removePod(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the block volume unmapped once the pod is gone", func() bool {
		_, gErr := os.Lstat(global)
		_, pErr := os.Lstat(filepath.Join(node.RootDir(), "pods", string(running.UID)))
		return os.IsNotExist(gErr) && os.IsNotExist(pErr)
	})

	// Read-only: the device is readable only ("r" cgroup access).
	pod = blockPodSpec(ns, "reader", "blk", true)
	cluster.CreatePod(t, pod)
	running = waitReady(t, ns, pod.Name)
	if out := execIn(t, ns, pod.Name, "c", "sh", "-c", "dd if=/dev/xvda bs=1 skip=512 count=8 2>/dev/null"); out != "from-pod" {
		t.Errorf("the read-only pod reads %q", out)
	}
	if out, err := cluster.Kubectl(ctxT(t), "-n", ns, "exec", pod.Name, "-c", "c", "--", "sh", "-c",
		"printf x | dd of=/dev/xvda conv=notrunc"); err == nil {
		t.Errorf("the read-only pod wrote the device: %q", out)
	}
	removePod(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the read-only pod's block volume unmapped", func() bool {
		_, gErr := os.Lstat(global)
		_, pErr := os.Lstat(filepath.Join(node.RootDir(), "pods", string(running.UID)))
		return os.IsNotExist(gErr) && os.IsNotExist(pErr)
	})

	// A Block claim mounted as a filesystem: the kubelet's error.
	pod = claimPodSpec(ns, "mounter", "blk", false)
	pod.Spec.NodeName = nodeName
	cluster.CreatePod(t, pod)
	awaitEvent(t, ns, pod.Name, func(reason, m string) bool {
		return reason == "FailedMount" && strings.Contains(m, "volume data has volumeMode Block, but is specified in volumeMounts")
	})
	removePod(t, ns, pod.Name)
	if b, err := os.ReadFile(backing); err != nil || !bytes.Equal(b[:9], []byte("from-host")) || !bytes.Equal(b[512:520], []byte("from-pod")) {
		t.Errorf("the backing file after the pods: %q %q %v", b[:9], b[512:520], err)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// On a node whose root dir is a small tmpfs: a pod writing past its
// emptyDir's sizeLimit is evicted with the kubelet's local storage message
// without any node pressure; then a pod filling its emptyDir past
// --eviction-hard nodefs.available is evicted with the kubelet's
// ephemeral-storage message and DisruptionTarget condition, while a quiet
// pod within its ephemeral-storage request keeps running. As on the
// kubelet, a pod that ends (evicted, or succeeded) loses its emptyDir and
// its pod cgroup at once, not when it is deleted: the DiskPressure an
// evicted pod's emptyDir caused clears with the pod still there, and its
// logs are still served. A restarted hostlet releases what an ended pod
// still holds.
func TestEvictionDisk(t *testing.T) {
	skipIfNoCluster(t)
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	const name = "hostlet-eviction-disk"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--root-dir", root,
		"--eviction-hard", "nodefs.available<20%",
		"--eviction-minimum-reclaim", "nodefs.available=1Mi",
		"--node-status-update-frequency", "1s",
		"--eviction-monitoring-interval", "2s",
		"--eviction-pressure-transition-period", "2s",
		"--volume-stats-agg-period", "2s",
	}})
	t.Cleanup(func() { h.Stop(); _ = unix.Unmount(root, unix.MNT_DETACH) })
	ctx := ctxT(t)
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionFalse, "")); err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	withScratch := func(p *v1.Pod, sizeLimit *resource.Quantity) *v1.Pod {
		p.Spec.NodeName = name
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: sizeLimit}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		return p
	}

	// Local storage eviction: over the sizeLimit, no threshold crossed.
	limit := resource.MustParse("4Mi")
	sized := withScratch(busybox(ns, "sized", "sh", "-c", "dd if=/dev/zero of=/scratch/f bs=1M count=6; echo written; sleep 3600"), &limit)
	cluster.CreatePod(t, sized)
	got := waitPhase(t, ns, sized.Name, v1.PodFailed)
	if want := `Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". `; got.Status.Reason != "Evicted" || got.Status.Message != want {
		t.Errorf("sized: reason %q message %q, want Evicted %q", got.Status.Reason, got.Status.Message, want)
	}
	checkReleased(t, h, root, ns, sized.Name, "written")

	// A pod that succeeded is released as well.
	done := withScratch(busybox(ns, "done", "sh", "-c", "dd if=/dev/zero of=/scratch/f bs=1M count=2; echo finished"), nil)
	cluster.CreatePod(t, done)
	waitPhase(t, ns, done.Name, v1.PodSucceeded)
	checkReleased(t, h, root, ns, done.Name, "finished")

	quiet := withScratch(busybox(ns, "quiet", "sleep", "3600"), nil)
	quiet.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("8Mi")}
	cluster.CreatePod(t, quiet)
	q := waitPhase(t, ns, quiet.Name, v1.PodRunning)
	// What checkReleased looks for is there while a pod runs.
	if !podLeftovers(h, root, q.UID) {
		t.Fatalf("quiet: no emptyDir or pod cgroup found where hostlet keeps them (%s, %s)", root, h.CgroupRoot())
	}

	// 52Mi of 64Mi leaves less than 20% (12.8Mi) available. The writer's
	// file stays in its emptyDir: its eviction relieves the pressure
	// because hostlet tears the emptyDir down when the pod ends, and the
	// quiet pod is not next.
	writer := withScratch(busybox(ns, "writer", "sh", "-c",
		"dd if=/dev/zero of=/scratch/f bs=1M count=52; echo filled; sleep 3600"), nil)
	cluster.CreatePod(t, writer)
	got = waitPhase(t, ns, writer.Name, v1.PodFailed)
	const prefix = "The node was low on resource: ephemeral-storage. Threshold quantity: "
	if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, prefix) {
		t.Errorf("writer: reason %q message %q", got.Status.Reason, got.Status.Message)
	}
	checkEvictedCondition(t, got)
	if msg := waitEvent(t, ns, writer.Name, "Evicted"); msg != got.Status.Message {
		t.Errorf("Evicted event %q, want the status message", msg)
	}
	t.Logf("evicted: %s", got.Status.Message)
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionFalse, "")); err != nil {
		t.Fatal(err)
	}

	checkReleased(t, h, root, ns, writer.Name, "filled")

	q, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, quiet.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q.Status.Phase != v1.PodRunning || q.Status.Reason != "" {
		t.Errorf("quiet pod: phase %s reason %q message %q", q.Status.Phase, q.Status.Reason, q.Status.Message)
	}
	if !podLeftovers(h, root, q.UID) {
		t.Error("quiet: its emptyDir or pod cgroup went while it runs")
	}

	// A hostlet that stopped before it released an ended pod (here: the
	// emptyDir and pod cgroup of the succeeded pod, made again while it is
	// down) releases it when it starts again, and still serves its logs.
	d, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, done.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.Stop()
	if err := os.MkdirAll(filepath.Join(podVolume(root, d.UID), "left"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range cgroupControllers() {
		if err := os.MkdirAll(cgroupDir(c, podCgroupPath(h, d.UID)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !podLeftovers(h, root, d.UID) {
		t.Fatal("done: the leftovers made for the restart are not where hostlet looks")
	}
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	checkReleased(t, h, root, ns, done.Name, "finished")
}

// podVolume is where a node with root dir root keeps the pod's emptyDir
// "scratch".
func podVolume(root string, uid types.UID) string {
	return filepath.Join(root, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", "scratch")
}

// podCgroupPath is a BestEffort pod's cgroup on node h.
func podCgroupPath(h *harness.Hostlet, uid types.UID) string {
	return filepath.Join(h.CgroupRoot(), "kubepods", "besteffort", "pod"+string(uid))
}

func cgroupControllers() []string {
	if cgroups.IsCgroup2UnifiedMode() {
		return []string{""}
	}
	return []string{"cpu", "memory", "pids"}
}

// podLeftovers: the pod's emptyDir and its cgroup (in every hierarchy)
// exist.
func podLeftovers(h *harness.Hostlet, root string, uid types.UID) bool {
	if _, err := os.Stat(podVolume(root, uid)); err != nil {
		return false
	}
	for _, c := range cgroupControllers() {
		if _, err := os.Stat(cgroupDir(c, podCgroupPath(h, uid))); err != nil {
			return false
		}
	}
	return true
}

// checkReleased waits for a pod that ended to lose its emptyDir "scratch"
// and its pod cgroup while its object stays, and checks that its logs
// still hold logged.
func checkReleased(t *testing.T, h *harness.Hostlet, root, ns, name, logged string) {
	t.Helper()
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	pollUntil(t, time.Minute, name+"'s emptyDir and pod cgroup to be removed", func() bool {
		if _, err := os.Stat(podVolume(root, p.UID)); !os.IsNotExist(err) {
			return false
		}
		for _, c := range cgroupControllers() {
			if _, err := os.Stat(cgroupDir(c, podCgroupPath(h, p.UID))); !os.IsNotExist(err) {
				return false
			}
		}
		return true
	})
	now, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil || now.UID != p.UID {
		t.Fatalf("%s: the pod object is gone (%v): it ended, it was not deleted", name, err)
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", name)
	if err != nil || !strings.Contains(out, logged) {
		t.Errorf("%s: kubectl logs = %q, %v; want %q in it", name, out, err, logged)
	}
}

// checkEvictedCondition checks the DisruptionTarget condition the kubelet
// sets on a pod it evicts for node pressure.
func checkEvictedCondition(t *testing.T, p *v1.Pod) {
	t.Helper()
	var dt *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			dt = &p.Status.Conditions[i]
		}
	}
	if dt == nil || dt.Status != v1.ConditionTrue || dt.Reason != v1.PodReasonTerminationByKubelet || dt.Message != p.Status.Message {
		t.Errorf("%s: DisruptionTarget %+v", p.Name, dt)
	}
}

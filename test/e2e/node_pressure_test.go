package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node whose root dir sits on a small tmpfs turns DiskPressure True when
// the filesystem fills past nodefs.available, rejects new pods with
// Evicted, and turns it False again once space is freed. Its allocatable
// subtracts --system-reserved and --kube-reserved too.
func TestNodeDiskPressure(t *testing.T) {
	skipIfNoCluster(t)
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	const name = "hostlet-disk"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--root-dir", root,
		"--eviction-hard", "memory.available<100Mi,nodefs.available<20%",
		"--system-reserved", "cpu=100m,memory=50Mi",
		"--kube-reserved", "memory=50Mi",
		"--node-status-update-frequency", "1s",
		"--eviction-pressure-transition-period", "2s",
	}})
	// Unmount after the node stopped (cleanups run last-in first-out).
	t.Cleanup(func() { h.Stop(); _ = unix.Unmount(root, unix.MNT_DETACH) })

	n, err := cluster.WaitForNode(ctxT(t), name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionFalse, ""))
	if err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	_ = unix.SchedGetaffinity(0, &set)
	mem := hostMemTotal(t)
	checkResources(t, n, map[v1.ResourceName][2]int64{
		v1.ResourceCPU:              {int64(set.Count()) * 1000, int64(set.Count())*1000 - 100},
		v1.ResourceMemory:           {mem, mem - 200<<20},
		v1.ResourceEphemeralStorage: {64 << 20, 64<<20 - (64<<20)/5},
	})

	fill := filepath.Join(root, "fill")
	if err := os.WriteFile(fill, make([]byte, 56<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	n, err = cluster.WaitForNode(ctxT(t), name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionTrue, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DiskPressure True after %v", time.Since(t0).Round(time.Millisecond))
	if c := nodeCondition(n, v1.NodeDiskPressure); c.Reason != "KubeletHasDiskPressure" {
		t.Errorf("DiskPressure %+v", c)
	}

	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "pressured", "true")
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, pod.Name, v1.PodFailed)
	if want := fmt.Sprintf("Pod was rejected: The node had condition: %v. ", []v1.NodeConditionType{v1.NodeDiskPressure}); p.Status.Reason != "Evicted" || p.Status.Message != want {
		t.Errorf("reason %q message %q, want Evicted %q", p.Status.Reason, p.Status.Message, want)
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctxT(t), name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionFalse, "")); err != nil {
		t.Fatal(err)
	}
}

// A harness node whose disk is 90% full (the kubelet's default
// nodefs.available<10% crossed) runs pods all the same: the harness's
// thresholds (harness.EvictionHard) leave the tests independent of how full
// the shared disk is.
func TestHarnessNodeOnFullDisk(t *testing.T) {
	skipIfNoCluster(t)
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	// Full before the node starts: its first eviction pass sees it.
	if err := os.WriteFile(filepath.Join(root, "fill"), make([]byte, 58<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "hostlet-full-disk"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--root-dir", root,
		"--eviction-monitoring-interval", "1s",
	}})
	t.Cleanup(h.Stop) // before the unmount

	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "on-full-disk", "true")
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodSucceeded)
	// The pod named its node, so it ran before the node lifecycle
	// controller took the not-ready taint a new node registers with off
	// (a node's first seconds); wait for that, then no taint may remain.
	n, err := cluster.WaitForNode(ctxT(t), name, time.Minute, func(n *v1.Node) (bool, error) {
		return len(n.Spec.Taints) == 0, nil
	})
	if err != nil {
		n, _ = cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{})
	}
	if n == nil {
		t.Fatal(err)
	}
	if c := nodeCondition(n, v1.NodeDiskPressure); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("DiskPressure %+v on a 90%% full disk", c)
	}
	for _, tn := range n.Spec.Taints {
		t.Errorf("node tainted %v", tn)
	}
}

// Stopping containerd turns Ready False with the kubelet's runtime message
// (within 20 s at the default 10 s status update frequency) and Ready comes
// back by itself once containerd is up again. Runs on a cluster of its own:
// the shared containerd must not stop under other tests.
func TestNodeRuntimeDown(t *testing.T) {
	skipIfNoCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	own, err := harness.Start(ctx, harness.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	const name = "hostlet-rt"
	if _, err := own.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: name}); err != nil {
		t.Fatal(err)
	}
	own.StopContainerd()
	t0 := time.Now()
	n, err := own.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeReady, v1.ConditionFalse, "container runtime is down"))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	t.Logf("Ready False after %v: %+v", took.Round(time.Millisecond), nodeCondition(n, v1.NodeReady))
	if took > 30*time.Second { // 20 s plus slack for a loaded machine
		t.Errorf("runtime outage took %v to show", took)
	}
	if c := nodeCondition(n, v1.NodeReady); c.Reason != "KubeletNotReady" {
		t.Errorf("Ready %+v", c)
	}
	if err := own.StartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := own.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeReady, v1.ConditionTrue, "")); err != nil {
		t.Fatal(err)
	}
}

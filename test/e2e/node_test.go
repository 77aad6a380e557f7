package e2e

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// hostletBinary is the binary TestMain built (BuildHostlet is idempotent).
func hostletBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = harness.BuildHostlet(context.Background()) })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// extraNode starts another hostlet node on the shared cluster and removes
// it (process and Node object) when the test ends.
func extraNode(t *testing.T, opts harness.HostletOptions) *harness.Hostlet {
	t.Helper()
	opts.Binary = hostletBinary(t)
	h, err := cluster.StartHostlet(ctxT(t), opts)
	if h != nil {
		t.Cleanup(func() {
			h.Stop()
			_ = cluster.Client().CoreV1().Nodes().Delete(context.Background(), opts.NodeName, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		log := "none"
		if h != nil {
			log = h.LogPath()
		}
		t.Fatalf("starting node %s: %v (log %s)", opts.NodeName, err, log)
	}
	return h
}

func nodeCondition(n *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// conditionIs waits for a node condition's status (and, if given, a
// message fragment).
func conditionIs(ct v1.NodeConditionType, status v1.ConditionStatus, msg string) func(*v1.Node) (bool, error) {
	return func(n *v1.Node) (bool, error) {
		c := nodeCondition(n, ct)
		return c != nil && c.Status == status && strings.Contains(c.Message, msg), nil
	}
}

func hostMemTotal(t *testing.T) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal")
	return 0
}

// The node's capacity is the host's (CPUs, MemTotal, the root dir's
// filesystem) and allocatable subtracts the hard eviction thresholds the
// harness set (harness.EvictionHard: a quantity for memory.available, a
// percentage for nodefs.available).
func TestNodeCapacity(t *testing.T) {
	skipIfNoCluster(t)
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(node.RootDir(), &fs); err != nil {
		t.Fatal(err)
	}
	disk := int64(fs.Blocks) * fs.Bsize
	mem := hostMemTotal(t)
	hard := map[string]string{}
	for _, s := range strings.Split(harness.EvictionHard, ",") {
		signal, v, _ := strings.Cut(s, "<")
		hard[signal] = v
	}
	q := resource.MustParse(hard["memory.available"])
	memThreshold := q.Value()
	pct, err := strconv.ParseFloat(strings.TrimSuffix(hard["nodefs.available"], "%"), 64)
	if err != nil {
		t.Fatalf("harness.EvictionHard %q: nodefs.available: %v", harness.EvictionHard, err)
	}
	checkResources(t, n, map[v1.ResourceName][2]int64{
		v1.ResourceCPU:              {int64(set.Count()) * 1000, int64(set.Count()) * 1000},
		v1.ResourceMemory:           {mem, mem - memThreshold},
		v1.ResourceEphemeralStorage: {disk, disk - int64(float64(disk)*(pct/100))},
		v1.ResourcePods:             {110, 110},
	})
	if got := n.Status.NodeInfo.KubeletVersion; got != "v1.35.4" {
		t.Errorf("kubeletVersion %q", got)
	}
	if !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("containerRuntimeVersion %q", n.Status.NodeInfo.ContainerRuntimeVersion)
	}
	if c := nodeCondition(n, v1.NodeReady); c == nil || c.Status != v1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Errorf("Ready condition %+v", c)
	}
	if c := nodeCondition(n, v1.NodeNetworkUnavailable); c != nil {
		t.Errorf("the kubelet sets no NetworkUnavailable condition, got %+v", c)
	}
}

// checkResources compares capacity ([0], cpu in millis) and allocatable ([1]).
func checkResources(t *testing.T, n *v1.Node, want map[v1.ResourceName][2]int64) {
	t.Helper()
	val := func(name v1.ResourceName, q resource.Quantity) int64 {
		if name == v1.ResourceCPU {
			return q.MilliValue()
		}
		return q.Value()
	}
	for name, w := range want {
		if got := val(name, n.Status.Capacity[name]); got != w[0] {
			t.Errorf("capacity %s = %d, want %d", name, got, w[0])
		}
		if got := val(name, n.Status.Allocatable[name]); got != w[1] {
			t.Errorf("allocatable %s = %d, want %d", name, got, w[1])
		}
	}
}

// The node Lease is renewed about every 10 s (kubelet: a quarter of its
// 40 s duration, 4% jitter) with the Node as owner.
func TestNodeLeaseRenews(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	leases := cluster.Client().CoordinationV1().Leases(v1.NamespaceNodeLease)
	var renewals []time.Time
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) && len(renewals) < 4 {
		l, err := leases.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *l.Spec.LeaseDurationSeconds != 40 || *l.Spec.HolderIdentity != nodeName {
			t.Fatalf("lease spec %+v", l.Spec)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" {
			t.Fatalf("lease owner %+v", l.OwnerReferences)
		}
		if rt := l.Spec.RenewTime.Time; len(renewals) == 0 || rt.After(renewals[len(renewals)-1]) {
			renewals = append(renewals, rt)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(renewals) < 3 {
		t.Fatalf("lease renewed %d times in 45 s", len(renewals)-1)
	}
	for i := 2; i < len(renewals); i++ { // the first observation is not a renewal we timed
		d := renewals[i].Sub(renewals[i-1])
		t.Logf("lease renewal interval %v", d.Round(time.Millisecond))
		if d < 8*time.Second || d > 15*time.Second {
			t.Errorf("lease renewal interval %v, want about 10 s", d)
		}
	}
}

// A pod asking for more CPU than allocatable is rejected by admission:
// Failed with OutOfcpu and the kubelet's message, and no container created.
func TestNodeAdmissionOutOfCPU(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "greedy", "sleep", "60")
	pod.Spec.NodeName = nodeName
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}
	created := cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, pod.Name, v1.PodFailed)
	if p.Status.Reason != "OutOfcpu" || !strings.HasPrefix(p.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, used: ") {
		t.Errorf("reason %q message %q", p.Status.Reason, p.Status.Message)
	}
	if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
		t.Errorf("container ran: %+v", p.Status.ContainerStatuses)
	}
	assertNoContainers(t, created.UID)
}

// assertNoContainers checks containerd has no container of the pod.
func assertNoContainers(t *testing.T, uid types.UID) {
	t.Helper()
	ctrs, err := cluster.ContainerdClient().Containers(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ctrs {
		labels, _ := c.Labels(ctxT(t))
		for _, v := range labels {
			if v == string(uid) {
				t.Errorf("container %s of rejected pod exists", c.ID())
			}
		}
	}
}

// A pod whose nodeSelector the node does not match is rejected with the
// kubelet's NodeAffinity reason.
func TestNodeAdmissionNodeAffinity(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "elsewhere", "true")
	pod.Spec.NodeName = nodeName
	pod.Spec.NodeSelector = map[string]string{"disktype": "nonexistent"}
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, pod.Name, v1.PodFailed)
	if p.Status.Reason != "NodeAffinity" || p.Status.Message != "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector" {
		t.Errorf("reason %q message %q", p.Status.Reason, p.Status.Message)
	}
}

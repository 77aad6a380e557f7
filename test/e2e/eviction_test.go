package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The hog's allocation and how far below the host's current memory
// available the threshold is set: other tests may use or free some memory
// meanwhile, but not this much.
const (
	hogBytes    = 2 << 30
	hogMargin   = 768 << 20
	hogLimit    = hogBytes + 512<<20
	cgroupV1Mem = "/sys/fs/cgroup/memory"
)

// hostMemoryAvailable is memory.available as the kubelet (and hostlet)
// observe it: MemTotal less the root cgroup's working set.
func hostMemoryAvailable(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(cgroupV1Mem + "/memory.usage_in_bytes")
	if err != nil {
		t.Skipf("no cgroup v1 memory controller: %v", err)
	}
	usage, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	f, err := os.Open(cgroupV1Mem + "/memory.stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inactiveFile int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "total_inactive_file "); ok {
			inactiveFile, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return hostMemTotal(t) - (usage - inactiveFile)
}

// A memory hog in a Burstable pod crosses --eviction-hard memory.available
// (set just below what the host has free): MemoryPressure turns True, the
// hog is evicted with the kubelet's reason, message, DisruptionTarget
// condition and event, the Guaranteed pod next to it keeps running, and
// MemoryPressure turns False again.
func TestEvictionMemoryHard(t *testing.T) {
	skipIfNoCluster(t)
	threshold := hostMemoryAvailable(t) - hogMargin
	got := evictMemoryHog(t, "hostlet-eviction", threshold, "--eviction-hard", fmt.Sprintf("memory.available<%d", threshold))
	if cs := got.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Terminated != nil && cs[0].State.Terminated.ExitCode != 137 {
		t.Errorf("hog: %+v, want killed at once (grace period 1 s; sh ignores SIGTERM)", cs[0].State.Terminated)
	}
}

// The same with a soft threshold: the hog is evicted only once the
// threshold has been crossed for its grace period.
func TestEvictionMemorySoft(t *testing.T) {
	skipIfNoCluster(t)
	threshold := hostMemoryAvailable(t) - hogMargin
	got := evictMemoryHog(t, "hostlet-eviction-soft", threshold,
		"--eviction-soft", fmt.Sprintf("memory.available<%d", threshold),
		"--eviction-soft-grace-period", "memory.available=6s",
		"--eviction-max-pod-grace-period", "2")
	if cs := got.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Terminated != nil {
		term := cs[0].State.Terminated
		if ran := term.FinishedAt.Sub(term.StartedAt.Time); ran < 6*time.Second {
			t.Errorf("hog ran %v, less than the soft grace period", ran)
		}
	}
}

// evictMemoryHog runs a Guaranteed pod and a memory hog on a node of its
// own with the given eviction flags, checks the hog's eviction and the
// node's MemoryPressure, and returns the evicted hog.
func evictMemoryHog(t *testing.T, name string, threshold int64, args ...string) *v1.Pod {
	t.Helper()
	extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: append([]string{
		"--node-status-update-frequency", "1s",
		// Slower than the status: MemoryPressure shows before the eviction.
		"--eviction-monitoring-interval", "3s",
		"--eviction-pressure-transition-period", "5s",
	}, args...)})
	ctx := ctxT(t)
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeMemoryPressure, v1.ConditionFalse, "")); err != nil {
		t.Fatal(err)
	}

	ns := cluster.NewNamespace(t)
	guaranteed := busybox(ns, "guaranteed", "sleep", "3600")
	guaranteed.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	guaranteed.Spec.NodeName = name
	cluster.CreatePod(t, guaranteed)
	waitPhase(t, ns, guaranteed.Name, v1.PodRunning)

	type pressed struct {
		n   *v1.Node
		err error
	}
	pressure := make(chan pressed, 1)
	go func() {
		n, err := cluster.WaitForNode(ctx, name, 2*time.Minute, conditionIs(v1.NodeMemoryPressure, v1.ConditionTrue, ""))
		pressure <- pressed{n, err}
	}()
	// dd holds its block-sized buffer (filled from /dev/zero) while it
	// waits to write into a pipe nobody reads: anonymous memory, bounded.
	hog := busybox(ns, "hog", "sh", "-c", fmt.Sprintf("dd if=/dev/zero bs=%d count=1 | sleep 3600", hogBytes))
	hog.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(hogLimit, resource.BinarySI)},
	}
	hog.Spec.NodeName = name
	cluster.CreatePod(t, hog)

	on := <-pressure
	if on.err != nil {
		t.Fatalf("MemoryPressure never True: %v", on.err)
	}
	pressedAt := nodeCondition(on.n, v1.NodeMemoryPressure).LastTransitionTime.Time
	got := waitPhase(t, ns, hog.Name, v1.PodFailed)
	// The threshold prints as the kubelet prints it: the flag's quantity in
	// canonical form (a byte count divisible by 1000 prints as "...k").
	q := resource.MustParse(strconv.FormatInt(threshold, 10))
	prefix := fmt.Sprintf("The node was low on resource: memory. Threshold quantity: %s, available: ", q.String())
	if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, prefix) ||
		!strings.Contains(got.Status.Message, ". Container c was using ") ||
		!strings.HasSuffix(got.Status.Message, ", request is 16Mi, has larger consumption of memory. ") {
		t.Errorf("hog: reason %q message %q", got.Status.Reason, got.Status.Message)
	}
	checkEvictedCondition(t, got)
	var freed time.Time // the hog's memory went with its container
	if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil {
		t.Errorf("hog: container statuses %+v", cs)
	} else {
		freed = cs[0].State.Terminated.FinishedAt.Time
	}
	if msg := waitEvent(t, ns, hog.Name, "Evicted"); msg != got.Status.Message {
		t.Errorf("Evicted event %q, want the status message", msg)
	}
	t.Logf("evicted: %s", got.Status.Message)

	n, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeMemoryPressure, v1.ConditionFalse, ""))
	if err != nil {
		t.Fatal(err)
	}
	// Not before the transition period has passed since the pressure was
	// last observed, at the latest in the eviction manager's round that
	// turned it on (which then waits for the evicted pod to stop, as the
	// kubelet's); times in whole seconds, the status a second late at most.
	if c := nodeCondition(n, v1.NodeMemoryPressure); c.LastTransitionTime.Time.Before(pressedAt.Add(3 * time.Second)) {
		t.Errorf("MemoryPressure False at %v, within --eviction-pressure-transition-period of its start at %v (the hog ended at %v)", c.LastTransitionTime, pressedAt, freed)
	}
	g, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, guaranteed.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Status.Phase != v1.PodRunning || g.Status.Reason != "" {
		t.Errorf("guaranteed pod: phase %s reason %q message %q", g.Status.Phase, g.Status.Reason, g.Status.Message)
	}
	return got
}

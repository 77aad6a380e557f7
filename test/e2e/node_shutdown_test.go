package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/logind"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Graceful node shutdown against a logind stand-in on a private system bus:
// hostlet takes a delay inhibitor lock; on PrepareForShutdown(true) the node
// goes NotReady "node is shutting down", regular pods are terminated before
// critical ones, each Failed/Terminated with a DisruptionTarget condition,
// new pods are rejected with NodeShutdown, and the lock is released.
func TestNodeGracefulShutdown(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ld, err := logind.Start(ctx, t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	const name = "hostlet-shutdown"
	h := extraNode(t, harness.HostletOptions{NodeName: name,
		Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + ld.Address},
		ExtraArgs: []string{
			"--shutdown-grace-period", "20s",
			"--shutdown-grace-period-critical-pods", "10s",
		}})
	waitLock := func(held bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return (len(ld.HeldBy(h.Pid())) > 0) == held, nil
		})
		if err != nil {
			t.Fatalf("inhibitor lock held=%v never reached; locks %+v", held, ld.Locks())
		}
	}
	waitLock(true)
	if l := ld.Locks()[0]; l.What != "shutdown" || l.Mode != "delay" {
		t.Errorf("lock %+v, want a shutdown delay lock", l)
	}

	ns := cluster.NewNamespace(t)
	// Both exit promptly on SIGTERM, so the order of termination shows.
	quick := []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"}
	regular := busybox(ns, "regular", quick...)
	critical := busybox(ns, "critical", quick...)
	critical.Spec.PriorityClassName = "system-cluster-critical"
	for _, p := range []*v1.Pod{regular, critical} {
		p.Spec.NodeName = name
		cluster.CreatePod(t, p)
	}
	for _, p := range []*v1.Pod{regular, critical} {
		waitPhase(t, ns, p.Name, v1.PodRunning)
	}

	if err := ld.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, name, 30*time.Second, conditionIs(v1.NodeReady, v1.ConditionFalse, "node is shutting down")); err != nil {
		t.Fatal(err)
	}
	finished := map[string]time.Time{}
	for _, p := range []*v1.Pod{regular, critical} {
		got := waitPhase(t, ns, p.Name, v1.PodFailed)
		if got.Status.Reason != "Terminated" || got.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("%s: reason %q message %q", p.Name, got.Status.Reason, got.Status.Message)
		}
		var dt *v1.PodCondition
		for i := range got.Status.Conditions {
			if got.Status.Conditions[i].Type == v1.DisruptionTarget {
				dt = &got.Status.Conditions[i]
			}
		}
		if dt == nil || dt.Status != v1.ConditionTrue || dt.Reason != v1.PodReasonTerminationByKubelet {
			t.Errorf("%s: DisruptionTarget %+v", p.Name, dt)
		}
		if cs := got.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Terminated != nil {
			finished[p.Name] = cs[0].State.Terminated.FinishedAt.Time
		} else {
			t.Errorf("%s: container statuses %+v", p.Name, cs)
		}
	}
	if finished["critical"].Before(finished["regular"]) {
		t.Errorf("critical pod finished %v, before the regular one %v", finished["critical"], finished["regular"])
	}
	waitLock(false)

	late := busybox(ns, "late", "true")
	late.Spec.NodeName = name
	cluster.CreatePod(t, late)
	got := waitPhase(t, ns, late.Name, v1.PodFailed)
	if got.Status.Reason != "NodeShutdown" || got.Status.Message != "Pod was rejected as the node is shutting down." {
		t.Errorf("late pod: reason %q message %q", got.Status.Reason, got.Status.Message)
	}
}

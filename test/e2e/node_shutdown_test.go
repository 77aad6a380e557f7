package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/logind"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if got.Status.Reason != "NodeShutdown" || got.Status.Message != "Pod was rejected: Pod was rejected as the node is shutting down." {
		t.Errorf("late pod: reason %q message %q", got.Status.Reason, got.Status.Message)
	}
}

// A pod that ignores SIGTERM and asks for more grace than the shutdown
// period is killed within the period, and its final status is in the API
// before hostlet lets go of the inhibitor lock: once it does, systemd stops
// hostlet, and a kill or a write still under way would leave the pod
// Running in the API (seen on a real host: the lock went at exactly the
// period, with the kill unfinished). The lock is held no longer than the
// period, which is all logind grants.
func TestNodeShutdownWritesFinalStatusBeforeRelease(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ld, err := logind.Start(ctx, t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	const name = "hostlet-shutdown-long"
	const period = 8 * time.Second
	h := extraNode(t, harness.HostletOptions{NodeName: name,
		Env:       []string{"DBUS_SYSTEM_BUS_ADDRESS=" + ld.Address},
		ExtraArgs: []string{"--shutdown-grace-period", period.String(), "--shutdown-grace-period-critical-pods", "0s"}})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(ld.HeldBy(h.Pid())) > 0, nil
	})
	if err != nil {
		t.Fatalf("no inhibitor lock: %+v", ld.Locks())
	}

	ns := cluster.NewNamespace(t)
	stubborn := busybox(ns, "stubborn", "sh", "-c", "trap '' TERM; while true; do sleep 0.2; done")
	stubborn.Spec.TerminationGracePeriodSeconds = ptrTo(int64(60))
	stubborn.Spec.NodeName = name
	cluster.CreatePod(t, stubborn)
	waitPhase(t, ns, stubborn.Name, v1.PodRunning)

	start := time.Now()
	if err := ld.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*period, true, func(context.Context) (bool, error) {
		return len(ld.HeldBy(h.Pid())) == 0, nil
	})
	held := time.Since(start)
	if err != nil {
		t.Fatalf("lock still held %v after PrepareForShutdown", held)
	}
	// What the API has the moment the lock is gone is what stays after the
	// host is down.
	got, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, stubborn.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodFailed || got.Status.Reason != "Terminated" {
		t.Errorf("when the lock was released (after %v): phase %s reason %q, want Failed Terminated", held, got.Status.Phase, got.Status.Reason)
	}
	if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 137 {
		t.Errorf("container statuses when the lock was released: %+v", cs)
	}
	// The budget is logind's: a lock kept past it is broken by logind anyway.
	if held > period+2*time.Second {
		t.Errorf("lock held %v, longer than the %v shutdown grace period", held, period)
	}
}

// shutdownGracePeriodByPodPriority (file only, as the kubelet's): pods are
// stopped band by band, the lowest priority first, each band waited for
// before the next, and logind is asked for the bands' periods together.
func TestNodeShutdownByPodPriority(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ld, err := logind.Start(ctx, t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	classes := map[string]int32{"hostlet-e2e-band-mid": 10000, "hostlet-e2e-band-high": 100000}
	for name, value := range classes {
		if _, err := cluster.Client().SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Client().SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	const name = "hostlet-shutdown-bands"
	h := extraNode(t, harness.HostletOptions{NodeName: name,
		Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + ld.Address},
		KubeletConfig: kcHeader + `shutdownGracePeriodByPodPriority:
- priority: 100000
  shutdownGracePeriodSeconds: 12
- priority: 0
  shutdownGracePeriodSeconds: 12
- priority: 10000
  shutdownGracePeriodSeconds: 12
`})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(ld.HeldBy(h.Pid())) > 0, nil
	}); err != nil {
		t.Fatalf("no inhibitor lock: %+v", ld.Locks())
	}

	ns := cluster.NewNamespace(t)
	// Each takes 1.5 s to stop: a band that did not wait for the one below
	// would finish in the same second.
	slow := []string{"sh", "-c", "trap 'sleep 1.5; exit 0' TERM; while true; do sleep 0.2; done"}
	order := []string{"low", "mid", "high"}
	for _, n := range order {
		p := busybox(ns, n, slow...)
		p.Spec.NodeName = name
		if n != "low" {
			p.Spec.PriorityClassName = "hostlet-e2e-band-" + n
		}
		cluster.CreatePod(t, p)
	}
	for _, n := range order {
		waitPhase(t, ns, n, v1.PodRunning)
	}
	if err := ld.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, n := range order {
		got := waitPhase(t, ns, n, v1.PodFailed)
		cs := got.Status.ContainerStatuses
		if got.Status.Reason != "Terminated" || len(cs) != 1 || cs[0].State.Terminated == nil {
			t.Fatalf("%s: reason %q, container statuses %+v", n, got.Status.Reason, cs)
		}
		at := cs[0].State.Terminated.FinishedAt.Time
		if !at.After(last) {
			t.Errorf("%s (band %s) finished at %v, not after the band below it (%v)", n, n, at, last)
		}
		last = at
	}
}

package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// A deleted pod stops its main containers first (together), then its
// sidecars in reverse order of definition, then releases the sandbox.
func TestTerminationOrder(t *testing.T) {
	s := newScenario(t, withInit(testPod("a", "b"), sidecar("s1"), sidecar("s2")))
	s.wantCalls("start s1#0", "start s2#0", "start a#0", "start b#0")
	final := s.delete(30)
	got := s.calls("stop", "teardown")
	if len(got) != 5 {
		t.Fatalf("calls %q", got)
	}
	mains := slices.Clone(got[:2])
	slices.Sort(mains)
	if !slices.Equal(mains, []string{"stop a 30s", "stop b 30s"}) || !slices.Equal(got[2:], []string{"stop s2 30s", "stop s1 30s", "teardown"}) {
		t.Fatalf("termination calls %q, want a and b, then s2, s1, teardown", got)
	}
	if final.Status.Phase != v1.PodFailed {
		t.Errorf("final phase %s", final.Status.Phase)
	}
	for _, c := range final.Status.ContainerStatuses {
		if c.State.Terminated == nil || c.Ready {
			t.Errorf("container after termination: %+v", c)
		}
	}
}

// The grace period is shared: the time a preStop hook takes is not given
// again to the stop signal, and the sidecars get what the main containers
// left. A hook that outruns the grace period is cut and the container gets
// the kubelet's 2 s.
func TestTerminationGraceAccounting(t *testing.T) {
	pod := withInit(testPod("a"), sidecar("s"))
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep"}}}}
	s := newScenario(t, pod)
	entered := make(chan string, 1)
	s.pr.hook = func(ctx context.Context, what string) error {
		done := s.clk.After(5 * time.Second)
		entered <- what
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	s.calls("start")
	s.delete(30, func() {
		if what := <-entered; what != "preStop a" {
			t.Errorf("hook %q", what)
		}
		s.clk.Step(5 * time.Second)
	})
	if got := s.calls("stop"); !slices.Equal(got, []string{"stop a 25s", "stop s 25s"}) {
		t.Fatalf("stops %q, want the 25 s the hook left", got)
	}

	// The hook takes longer than the grace period.
	s = newScenario(t, pod)
	// a's hook runs on until a is stopped, as the kubelet only stops
	// waiting for it (the suite's sidecar preStop specs time it: grace +
	// 2 s).
	hookCtx := make(chan context.Context, 1)
	s.pr.hook = func(ctx context.Context, what string) error {
		hookCtx <- ctx
		entered <- what
		<-ctx.Done()
		return ctx.Err()
	}
	var hookAtStop error = errors.New("a not stopped")
	s.rt.onStop = func(name string) {
		if name == "a" {
			hookAtStop = (<-hookCtx).Err()
		}
	}
	s.calls("start")
	s.delete(10, func() {
		<-entered
		s.clk.Step(10 * time.Second)
	})
	if hookAtStop != nil {
		t.Errorf("a's hook at its stop: %v, want it still running", hookAtStop)
	}
	// With no grace left the sidecar's turn does not wait for a.
	got := s.calls("stop")
	slices.Sort(got)
	if !slices.Equal(got, []string{"stop a 2s", "stop s 2s"}) {
		t.Fatalf("stops %q, want the 2 s minimum", got)
	}
}

// A pod running longer than activeDeadlineSeconds (from its start) is
// stopped and ends Failed with DeadlineExceeded.
func TestActiveDeadlineThroughWorker(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyAlways)
	pod.Spec.ActiveDeadlineSeconds = int64p(60)
	s := newScenario(t, pod)
	s.calls("start")
	s.step(59 * time.Second)
	s.wantCalls()
	s.step(time.Second)
	s.wantCalls("stop a 30s")
	s.wantPhase(v1.PodFailed)
	if st := s.status(); st.Reason != "DeadlineExceeded" {
		t.Errorf("reason %q", st.Reason)
	}
	s.wantEvent("Warning DeadlineExceeded: Pod was active on the node longer than the specified deadline")
}

// The node stopping a pod (shutdown, eviction) stops its containers within
// the given grace and ends it Failed with the reason, without deleting it.
func TestStopRequest(t *testing.T) {
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	s.calls("start")
	stopped := s.w.Stop(StopRequest{Grace: 7 * time.Second, Reason: "Terminated", Message: "node shutting down",
		Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}})
	s.settle()
	<-stopped.Ended
	<-stopped.Released
	s.wantCalls("stop a 7s")
	s.wantPhase(v1.PodFailed)
	if st := s.status(); st.Reason != "Terminated" || podCondition(st, v1.DisruptionTarget).Status != v1.ConditionTrue {
		t.Errorf("status %+v", st)
	}
	// Nothing restarts a stopped pod.
	s.step(time.Hour)
	s.wantCalls()
}

// A stopped pod has ended, its final status published, before what it
// held on the host is released: the node's shutdown waits for the end
// only, the release taking seconds it has not got (seen on a slow host:
// the release of each pod took 10 s and a pod killed at the end of the
// shutdown period stayed Running in the API).
func TestStopEndsBeforeRelease(t *testing.T) {
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways), func(s *scenario) {
		s.releasing = make(chan struct{})
	})
	s.calls("start")
	stopped := s.w.Stop(StopRequest{Grace: time.Second, Reason: "Terminated", Message: "node shutting down"})
	s.resume <- struct{}{}
	select {
	case <-stopped.Ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not end while the release was held")
	}
	if st := s.w.Status(); st == nil || st.Status.Phase != v1.PodFailed || st.Status.Reason != "Terminated" {
		t.Errorf("status published when the stop ended: %+v", st)
	}
	select {
	case <-stopped.Released:
		t.Fatal("released while the release was still held")
	default:
	}
	close(s.releasing)
	select {
	case <-stopped.Released:
	case <-time.After(10 * time.Second):
		t.Fatal("not released once the release went on")
	}
	s.waitIdle()
	s.settle()
	if got := s.calls("stop", "teardown", "released"); !slices.Equal(got, []string{"stop a 2s", "teardown", "released Failed"}) {
		t.Errorf("calls %q", got)
	}
}

// A pod that ends on its own is released once, with its terminal status,
// after its containers and sandbox stopped; a stopped one before its
// Stopping.Released closes (the eviction manager waits for its resources); a
// deleted one never (its cleanup removes everything).
func TestReleasedOnceTerminal(t *testing.T) {
	s := newScenario(t, testPod("a"))
	s.calls("") // all of the start
	s.exit("a", 0)
	if got := s.calls("teardown", "released"); !slices.Equal(got, []string{"teardown", "released Succeeded"}) {
		t.Fatalf("calls %q, want the sandbox torn down, then the pod released", got)
	}
	s.step(time.Hour)
	s.delete(30)
	if got := s.calls("released", "sandbox", "start"); len(got) != 0 {
		t.Fatalf("after the release: %q", got)
	}

	s = newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	s.calls("start")
	stopped := s.w.Stop(StopRequest{Grace: time.Second, Reason: "Evicted", Message: "m"})
	s.settle()
	<-stopped.Released
	if got := s.calls("released"); !slices.Equal(got, []string{"released Failed"}) {
		t.Fatalf("calls %q, want the stopped pod released", got)
	}

	s = newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	s.delete(30)
	if got := s.calls("released"); len(got) != 0 {
		t.Fatalf("a deleted pod was released: %q", got)
	}
}

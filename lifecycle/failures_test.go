package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Every way a start can fail backs off as the kubelet's does: no container
// is started more often than its back-off allows, whatever made it fail.

// startsWithin counts the starts of container name over d of fake time,
// stepping a second at a time.
func (s *scenario) startsWithin(name string, d time.Duration) int {
	n := 0
	count := func() {
		for _, c := range s.calls("start") {
			if strings.HasPrefix(c, "start "+name+"#") {
				n++
			}
		}
	}
	count()
	for range int(d / time.Second) {
		s.step(time.Second)
		count()
	}
	return n
}

// A container whose process cannot start (StartError: a missing binary)
// restarts at once the first time, then after 10 s, 20 s, 40 s ..., waiting
// as CrashLoopBackOff with the StartError as its last state: four starts in
// its first minute, as with the kubelet (it took hundreds, the epoch
// startedAt of a StartError read as a run long enough to reset the back-off).
func TestStartErrorBacksOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  func() *v1.Pod
	}{
		{"main container", func() *v1.Pod { return restartPolicy(testPod("a"), v1.RestartPolicyAlways) }},
		{"main container, OnFailure", func() *v1.Pod { return restartPolicy(testPod("a"), v1.RestartPolicyOnFailure) }},
		{"init container", func() *v1.Pod {
			return withInit(restartPolicy(testPod("main"), v1.RestartPolicyAlways), v1.Container{Name: "a"})
		}},
		{"sidecar", func() *v1.Pod { return withInit(restartPolicy(testPod("main"), v1.RestartPolicyNever), sidecar("a")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, tc.pod(), func(s *scenario) { s.rt.startErrors["a"] = "exec: /no/such/binary: not found" })
			s.wantCalls("start a#0", "start a#1")
			s.wantWaiting("a", "CrashLoopBackOff")
			c := s.container("a")
			if term := c.LastTerminationState.Terminated; term == nil || term.Reason != "StartError" || term.ExitCode != 128 {
				t.Fatalf("last state %+v, want the StartError", c.LastTerminationState)
			}
			if w := c.State.Waiting; !strings.HasPrefix(w.Message, "back-off 10s restarting failed container=a pod=p_ns(uid-1)") {
				t.Errorf("waiting message %q", w.Message)
			}
			for i, wait := range []time.Duration{10, 20, 40, 80} {
				s.step(wait*time.Second - time.Millisecond)
				s.wantCalls()
				s.step(time.Millisecond)
				s.wantCalls(fmt.Sprintf("start a#%d", i+2))
				s.wantWaiting("a", "CrashLoopBackOff")
			}
			if got := s.container("a").RestartCount; got != 5 {
				t.Errorf("restartCount %d, want 5", got)
			}
			s.wantEvent("Warning BackOff: Back-off restarting failed container a in pod p_ns(uid-1)")
			s.wantEvent("Warning Failed: Error: exec: /no/such/binary: not found")
			if tc.name == "main container" {
				// Nothing resets it: the next waits are 160 s, then 300 s.
				s.step(160*time.Second - time.Millisecond)
				s.wantCalls()
				s.step(time.Millisecond)
				s.wantCalls("start a#6")
			}
		})
	}
}

// Over its first minute a failing container starts as often as the
// kubelet's back-off allows and no more, for each way of failing: an exit
// and a StartError at 0, ~0, 10 and 30 s; a process that could not be run
// (RunContainerError) the same; a container that could not be made
// (CreateContainerConfigError, CreateContainerError) every 10 s; an image
// that cannot be pulled at 0, 10 and 30 s.
func TestStartsPerMinuteByFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*scenario)
		want  int
	}{
		{"StartError", func(s *scenario) { s.rt.startErrors["a"] = "no such file" }, 4},
		{"RunContainerError", func(s *scenario) { s.rt.failStart["a"] = errors.New("task start: ttrpc closed") }, 4},
		{"CreateContainerConfigError", func(s *scenario) {
			s.rt.failStart["a"] = &Failure{Reason: "CreateContainerConfigError", Message: `configmap "x" not found`}
		}, 7},
		{"CreateContainerError", func(s *scenario) {
			s.rt.failStart["a"] = &Failure{Reason: "CreateContainerError", Message: "mount propagation"}
		}, 7},
		{"ErrImagePull", func(s *scenario) { s.rt.failStart["a"] = &Failure{Reason: "ErrImagePull", Message: "not found"} }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways), tc.setup)
			if got := s.startsWithin("a", time.Minute); got != tc.want {
				t.Errorf("%d starts in the first minute, want %d", got, tc.want)
			}
		})
	}
	// A crash loop, for comparison: the same as a StartError.
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	n := 0
	for range 60 {
		for _, c := range s.calls("start") {
			if strings.HasPrefix(c, "start a#") {
				n++
			}
		}
		s.rt.mu.Lock()
		running := false
		for _, c := range s.rt.containers {
			running = running || c.Running
		}
		s.rt.mu.Unlock()
		if running {
			s.exit("a", 1)
			continue
		}
		s.step(time.Second)
	}
	if n != 4 {
		t.Errorf("a crash loop started %d times in its first minute, want 4", n)
	}
}

// A process that could not be run (RunContainerError) waits as
// CrashLoopBackOff with the kubelet's message between its retries, and a
// start that works ends the back-off.
func TestRunContainerErrorBacksOff(t *testing.T) {
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways), func(s *scenario) {
		s.rt.failStart["a"] = errors.New("task start: ttrpc closed")
	})
	s.wantCalls("start a#0", "start a#0")
	s.wantWaiting("a", "RunContainerError")
	s.w.Update(s.w.Object())
	s.settle()
	s.wantWaiting("a", "CrashLoopBackOff")
	if w := s.container("a").State.Waiting; !strings.HasPrefix(w.Message, "back-off 10s restarting failed container=a") {
		t.Errorf("waiting message %q", w.Message)
	}
	s.rt.mu.Lock()
	delete(s.rt.failStart, "a")
	s.rt.mu.Unlock()
	s.step(10 * time.Second)
	s.wantCalls("start a#0")
	s.wantPhase(v1.PodRunning)
	if c := s.container("a"); c.State.Running == nil || c.RestartCount != 0 {
		t.Errorf("status %+v", c)
	}
}

// A sandbox found not whole after a restart of hostlet (killed in its
// making, a namespace lost) while a container of the pod still runs: the
// container is stopped, the sandbox made again, and the container started
// in it, as the kubelet does when a pod's sandbox changed.
func TestSandboxNotReadyStopsItsContainers(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyAlways)
	s := newScenario(t, pod, holding(ContainerInfo{ID: "old", Name: "a", Attempt: 0, Running: true, StartedAt: epoch.Add(-time.Minute)}),
		func(s *scenario) { s.rt.sandbox = false })
	if got := s.calls("stop", "sandbox", "start"); strings.Join(got, ",") != "stop a 30s,sandbox,start a#1" {
		t.Fatalf("calls %q, want the old container stopped, a new sandbox, a new start", got)
	}
	s.wantPhase(v1.PodRunning)
	if c := s.container("a"); c.State.Running == nil || c.RestartCount != 1 {
		t.Errorf("status %+v", c)
	}
	// The same for a sandbox lost while the worker ran.
	s.rt.mu.Lock()
	s.rt.sandbox = false
	s.rt.mu.Unlock()
	s.w.Update(s.w.Object())
	s.settle()
	if got := s.calls("stop", "sandbox", "start"); strings.Join(got, ",") != "stop a 30s,sandbox" {
		t.Fatalf("calls %q after the sandbox was lost", got)
	}
	// Its second stop within 10 s backs off as a second exit would: the
	// kubelet's doBackOff looks at the killed instance's finish.
	s.wantWaiting("a", "CrashLoopBackOff")
	s.step(10 * time.Second)
	s.wantCalls("start a#2")
	if s.container("a").State.Running == nil {
		t.Errorf("not running again: %+v", s.container("a"))
	}
}

// A pod that never restarts is not made again in a new sandbox: its
// containers are stopped and it ends, as the kubelet's computePodActions
// leaves a restartPolicy Never pod whose sandbox died.
func TestSandboxNotReadyEndsANeverPod(t *testing.T) {
	s := newScenario(t, testPod("a"), holding(ContainerInfo{ID: "old", Name: "a", Running: true, StartedAt: epoch.Add(-time.Minute)}),
		func(s *scenario) { s.rt.sandbox = false })
	if got := s.calls("stop", "sandbox", "start"); strings.Join(got, ",") != "stop a 30s" {
		t.Fatalf("calls %q, want only the stop", got)
	}
	s.wantPhase(v1.PodFailed)
}

package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// debug adds an ephemeral container to the worker's pod, as the
// ephemeralcontainers subresource does, and lets the worker react.
func (s *scenario) debug(name, target string) {
	s.t.Helper()
	pod := s.w.Object().DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "debugger"},
		TargetContainerName:      target,
	})
	s.w.Update(pod)
	s.settle()
}

func (s *scenario) ephemeral(name string) v1.ContainerStatus {
	s.t.Helper()
	for _, c := range s.status().EphemeralContainerStatuses {
		if c.Name == name {
			return c
		}
	}
	s.t.Fatalf("no ephemeral status of %s in %+v", name, s.status().EphemeralContainerStatuses)
	return v1.ContainerStatus{}
}

// An ephemeral container added to a running pod starts at once, shows in
// ephemeralContainerStatuses (never ready, no started flag: no probe runs in
// it), and is never restarted, whatever the pod's restart policy and however
// long the pod runs on.
func TestEphemeralNeverRestarted(t *testing.T) {
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	s.wantCalls("start a#0")
	s.debug("dbg", "a")
	s.wantCalls("start dbg#0")
	st := s.ephemeral("dbg")
	if st.State.Running == nil || st.Ready || st.Started != nil || st.ContainerID == "" {
		t.Fatalf("running ephemeral container: %+v", st)
	}
	if len(s.status().ContainerStatuses) != 1 {
		t.Fatalf("ephemeral container among the regular statuses: %+v", s.status().ContainerStatuses)
	}
	s.exit("dbg", 1)
	s.step(DefaultBackoff.Max)
	s.wantCalls()
	st = s.ephemeral("dbg")
	if st.State.Terminated == nil || st.State.Terminated.Reason != "Error" || st.RestartCount != 0 {
		t.Fatalf("exited ephemeral container: %+v", st.State)
	}
	// Its exit changes nothing of the pod.
	s.wantPhase(v1.PodRunning)
	if c := s.container("a"); !c.Ready {
		t.Fatalf("main container after the ephemeral one exited: %+v", c)
	}
}

// Ephemeral containers do not wait for the pod's initialization: one added
// while an init container runs starts at once, the main containers still
// waiting behind the init container.
func TestEphemeralDuringInit(t *testing.T) {
	s := newScenario(t, withInit(testPod("a"), v1.Container{Name: "i1"}))
	s.wantCalls("start i1#0")
	s.debug("dbg", "")
	s.wantCalls("start dbg#0")
	s.wantWaiting("a", "PodInitializing")
	s.exit("i1", 0)
	s.wantCalls("start a#0")
}

// A running ephemeral container is stopped with the pod, alongside the main
// containers and before the sidecars; the final status shows it terminated.
func TestEphemeralStoppedWithPod(t *testing.T) {
	s := newScenario(t, withInit(testPod("a"), sidecar("side")))
	s.wantCalls("start side#0", "start a#0")
	s.debug("dbg", "a")
	s.wantCalls("start dbg#0")
	final := s.delete(30)
	stops := s.calls("stop")
	if len(stops) != 3 || stops[2] != "stop side 30s" {
		t.Fatalf("stops %q: the sidecar stops last", stops)
	}
	var dbg *v1.ContainerStatus
	for i := range final.Status.EphemeralContainerStatuses {
		dbg = &final.Status.EphemeralContainerStatuses[i]
	}
	if dbg == nil || dbg.State.Terminated == nil {
		t.Fatalf("final ephemeral status: %+v", final.Status.EphemeralContainerStatuses)
	}
}

// A start that created nothing (the image cannot be pulled) is retried with
// the image back-off, the container waiting with the reason; one whose
// process failed after it was created (StartError) is not retried.
func TestEphemeralStartFailures(t *testing.T) {
	s := newScenario(t, testPod("a"))
	s.wantCalls("start a#0")
	s.rt.mu.Lock()
	s.rt.failStart["dbg"] = &Failure{Reason: "ErrImagePull", Message: "no such image"}
	s.rt.mu.Unlock()
	s.debug("dbg", "")
	s.wantCalls("start dbg#0")
	if w := s.ephemeral("dbg").State.Waiting; w == nil || w.Reason != "ErrImagePull" {
		t.Fatalf("ephemeral container whose image failed: %+v", s.ephemeral("dbg").State)
	}
	s.rt.mu.Lock()
	delete(s.rt.failStart, "dbg")
	s.rt.mu.Unlock()
	s.step(DefaultBackoff.Max)
	s.wantCalls("start dbg#0")
	if s.ephemeral("dbg").State.Running == nil {
		t.Fatalf("ephemeral container after its retry: %+v", s.ephemeral("dbg").State)
	}

	s = newScenario(t, testPod("a"))
	s.wantCalls("start a#0")
	info := ContainerInfo{ID: "bad", Name: "dbg", Exited: true, ExitCode: 128, Reason: "StartError"}
	s.rt.mu.Lock()
	s.rt.failStart["dbg"] = &Failure{Reason: "StartError", Message: "exec: not found", Info: &info}
	s.rt.mu.Unlock()
	s.debug("dbg", "")
	s.step(DefaultBackoff.Max)
	s.wantCalls("start dbg#0")
	if term := s.ephemeral("dbg").State.Terminated; term == nil || term.Reason != "StartError" {
		t.Fatalf("ephemeral container that failed to start: %+v", s.ephemeral("dbg").State)
	}
}

// A pod that has finished runs nothing more: an ephemeral container added
// to it waits for ever, as with the kubelet.
func TestEphemeralNotStartedInFinishedPod(t *testing.T) {
	s := newScenario(t, testPod("a"))
	s.exit("a", 0)
	s.wantPhase(v1.PodSucceeded)
	s.calls("start", "stop")
	s.debug("dbg", "")
	s.wantCalls()
	if w := s.ephemeral("dbg").State.Waiting; w == nil {
		t.Fatalf("ephemeral container of a finished pod: %+v", s.ephemeral("dbg").State)
	}
}

// A restarted hostlet adopts ephemeral containers as they are: the one
// still running is not started again, the one that exited is not re-run.
func TestEphemeralAdopted(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyAlways)
	for _, name := range []string{"live", "gone"} {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "debugger"}})
	}
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "a1", Name: "a", Running: true, StartedAt: epoch.Add(-time.Minute)},
		ContainerInfo{ID: "e1", Name: "live", Running: true, StartedAt: epoch.Add(-time.Minute)},
		ContainerInfo{ID: "e2", Name: "gone", Exited: true, ExitCode: 0, FinishedAt: epoch.Add(-time.Second)},
	))
	s.step(DefaultBackoff.Max)
	s.wantCalls()
	if s.ephemeral("live").State.Running == nil || s.ephemeral("gone").State.Terminated == nil {
		t.Fatalf("adopted ephemeral statuses %+v", s.status().EphemeralContainerStatuses)
	}
}

package lifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/hostlet/hostlet/probes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// holding fills the runtime with what a previous hostlet left of a pod.
func holding(infos ...ContainerInfo) func(*scenario) {
	return func(s *scenario) {
		s.rt.sandbox = true
		for _, info := range infos {
			s.rt.containers[info.ID] = info
		}
	}
}

// A restarted hostlet adopts the running containers of its pods: nothing
// is started again, restart counts and lastState continue, and the
// back-off the exited instance recorded applies to the next crash.
func TestAdoptRunningContainer(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyAlways)
	pod.Status.StartTime = &metav1.Time{Time: epoch.Add(-time.Hour)}
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "old1", Name: "a", Attempt: 1, Exited: true, ExitCode: 2,
			StartedAt: epoch.Add(-3 * time.Minute), FinishedAt: epoch.Add(-2 * time.Minute),
			BackoffApplied: 20 * time.Second, BackoffNext: 40 * time.Second},
		ContainerInfo{ID: "old2", Name: "a", Attempt: 2, Running: true, StartedAt: epoch.Add(-time.Minute)},
	))
	s.wantCalls()
	s.wantPhase(v1.PodRunning)
	c := s.container("a")
	if c.RestartCount != 2 || c.State.Running == nil || c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 2 {
		t.Fatalf("adopted status %+v", c)
	}
	if st := s.status().StartTime; st == nil || !st.Time.Equal(epoch.Add(-time.Hour)) {
		t.Errorf("start time %v, want the first worker's", st)
	}
	s.exit("a", 1)
	s.wantCalls()
	s.wantWaiting("a", "CrashLoopBackOff")
	s.step(40*time.Second - time.Millisecond)
	s.wantCalls()
	s.step(time.Millisecond)
	s.wantCalls("start a#3")
}

// A container that was waiting for its restart when hostlet stopped is
// restarted when its recorded back-off ends, and the next one is longer.
func TestAdoptWaitingContainer(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyAlways)
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "old", Name: "a", Attempt: 3, Exited: true, ExitCode: 1,
			StartedAt: epoch.Add(-10 * time.Second), FinishedAt: epoch.Add(-5 * time.Second),
			BackoffApplied: 40 * time.Second, BackoffNext: 80 * time.Second},
	))
	s.wantCalls()
	s.wantWaiting("a", "CrashLoopBackOff")
	s.step(35*time.Second - time.Millisecond)
	s.wantCalls()
	s.step(time.Millisecond)
	s.wantCalls("start a#4")
	s.exit("a", 1)
	s.step(80*time.Second - time.Millisecond)
	s.wantCalls()
	s.step(time.Millisecond)
	s.wantCalls("start a#5")
}

// Adopted init containers are not run again: a pod whose main containers
// exist counts as initialized.
func TestAdoptInitializedPod(t *testing.T) {
	pod := withInit(restartPolicy(testPod("a"), v1.RestartPolicyAlways), v1.Container{Name: "i"})
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "i0", Name: "i", Exited: true, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Minute)},
		ContainerInfo{ID: "a0", Name: "a", Running: true, StartedAt: epoch.Add(-time.Minute)},
	))
	s.wantCalls()
	if podCondition(s.status(), v1.PodInitialized).Status != v1.ConditionTrue {
		t.Errorf("adopted pod not initialized: %+v", s.status().Conditions)
	}
}

// When the sandbox is gone (a reboot), everything starts over in a new one,
// init containers included, as the kubelet does.
func TestAdoptLostSandbox(t *testing.T) {
	pod := withInit(restartPolicy(testPod("a"), v1.RestartPolicyAlways), v1.Container{Name: "i"})
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "i0", Name: "i", Exited: true, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Minute)},
		ContainerInfo{ID: "a0", Name: "a", Exited: true, ExitCode: 137, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Second)},
	), func(s *scenario) { s.rt.sandbox = false })
	s.wantCalls("start i#1")
	s.exit("i", 0)
	s.wantCalls("start a#1")
}

// The same while the worker runs: a sandbox lost under a running pod is
// recreated and the init containers run again before the main ones.
func TestLostSandboxReinitializes(t *testing.T) {
	pod := withInit(restartPolicy(testPod("a"), v1.RestartPolicyAlways), v1.Container{Name: "i"})
	s := newScenario(t, pod)
	s.exit("i", 0)
	s.wantCalls("start i#0", "start a#0")
	s.rt.mu.Lock()
	s.rt.sandbox = false
	s.rt.mu.Unlock()
	s.exit("a", 137)
	s.wantCalls("start i#1")
	s.step(time.Minute)
	s.wantCalls() // a waits for i
	s.exit("i", 0)
	s.wantCalls("start a#1")
}

// A pod that never restarts runs nothing again in a new sandbox.
func TestAdoptLostSandboxNever(t *testing.T) {
	pod := withInit(testPod("a"), v1.Container{Name: "i"})
	pod.Status.Phase = v1.PodRunning
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "i0", Name: "i", Exited: true, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Minute)},
		ContainerInfo{ID: "a0", Name: "a", Exited: true, ExitCode: 137, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Second)},
	), func(s *scenario) { s.rt.sandbox = false })
	s.wantCalls()
	s.wantPhase(v1.PodFailed)
}

// A pod whose containers all ended for good before a restart of hostlet
// (its terminal status not written yet) gets no new sandbox, so no volumes
// either, as the kubelet's computePodActions: it ends as it is and is
// released.
func TestAdoptFinishedPodGetsNoSandbox(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyOnFailure)
	pod.Status.Phase = v1.PodRunning
	s := newScenario(t, pod, holding(
		ContainerInfo{ID: "a0", Name: "a", Exited: true, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Second)},
	), func(s *scenario) { s.rt.sandbox = false })
	if got := s.calls("sandbox", "start", "released"); !slices.Equal(got, []string{"released Succeeded"}) {
		t.Fatalf("calls %q, want only the release", got)
	}
	s.wantPhase(v1.PodSucceeded)

	// The same for an init container that failed for good.
	pod = withInit(testPod("a"), v1.Container{Name: "i"})
	pod.Status.Phase = v1.PodPending
	s = newScenario(t, pod, holding(
		ContainerInfo{ID: "i0", Name: "i", Exited: true, ExitCode: 1, StartedAt: epoch.Add(-time.Minute), FinishedAt: epoch.Add(-time.Second)},
	), func(s *scenario) { s.rt.sandbox = false })
	if got := s.calls("sandbox", "start", "released"); !slices.Equal(got, []string{"released Failed"}) {
		t.Fatalf("calls %q, want only the release", got)
	}
}

// An adopted container keeps what the API says of it until its probes
// say otherwise, as on the kubelet: started, and ready while the pod was
// Ready; a restart of hostlet takes no pod out of its Services. Another
// instance than the API's starts over.
func TestAdoptKeepsProbeState(t *testing.T) {
	adopted := func(apiID string, podReady v1.ConditionStatus) *scenario {
		pod := testPod("a")
		pod.Spec.Containers[0].StartupProbe = startupProbe()
		pod.Spec.Containers[0].ReadinessProbe = startupProbe()
		started := true
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "a", ContainerID: "containerd://" + apiID, Started: &started, Ready: true,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(epoch.Add(-time.Minute))}}}}
		pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: podReady}}
		return newScenario(t, pod, holding(ContainerInfo{ID: "old", Name: "a", Running: true, StartedAt: epoch.Add(-time.Minute)}))
	}
	s := adopted("old", v1.ConditionTrue)
	s.wantCalls()
	if c := s.container("a"); !*c.Started || !c.Ready || podCondition(s.status(), v1.PodReady).Status != v1.ConditionTrue {
		t.Fatalf("adopted: %+v", c)
	}
	s.probe("a", probes.Readiness, false)
	if s.container("a").Ready {
		t.Fatal("still ready after the readiness probe failed")
	}

	// The pod was not Ready: the container waits for its probe.
	s = adopted("old", v1.ConditionFalse)
	if c := s.container("a"); !*c.Started || c.Ready {
		t.Fatalf("adopted in a pod not Ready: %+v", c)
	}

	// The API's status is of another instance.
	s = adopted("older", v1.ConditionTrue)
	if c := s.container("a"); *c.Started || c.Ready {
		t.Fatalf("adopted, the API speaking of another instance: %+v", c)
	}
}

package lifecycle

import (
	"testing"

	"github.com/hostlet/hostlet/probes"
	v1 "k8s.io/api/core/v1"
)

// Init containers run one at a time, each after the one before completed;
// the main containers then start together. Until then they wait as
// PodInitializing and the pod is Pending.
func TestInitContainersRunInOrder(t *testing.T) {
	s := newScenario(t, withInit(testPod("a", "b"), v1.Container{Name: "i1"}, v1.Container{Name: "i2"}))
	s.wantCalls("start i1#0")
	s.wantWaiting("a", "PodInitializing")
	s.wantPhase(v1.PodPending)
	s.exit("i1", 0)
	s.wantCalls("start i2#0")
	s.exit("i2", 0)
	s.wantCalls("start a#0", "start b#0")
	s.wantPhase(v1.PodRunning)
	if c := s.container("i1"); c.State.Terminated == nil || !c.Ready {
		t.Errorf("completed init container: %+v", c)
	}
}

// A failed init container of a pod that never restarts fails the pod and
// nothing after it runs; with OnFailure it is restarted (immediately, then
// with the crash-loop back-off) and the pod stays Pending.
func TestInitContainerFailure(t *testing.T) {
	s := newScenario(t, withInit(testPod("a"), v1.Container{Name: "i1"}))
	s.exit("i1", 3)
	s.wantCalls("start i1#0")
	s.wantPhase(v1.PodFailed)

	s = newScenario(t, withInit(restartPolicy(testPod("a"), v1.RestartPolicyOnFailure), v1.Container{Name: "i1"}))
	s.exit("i1", 3)
	s.wantCalls("start i1#0", "start i1#1")
	s.exit("i1", 3)
	s.wantCalls()
	s.wantWaiting("i1", "CrashLoopBackOff")
	s.wantPhase(v1.PodPending)
	s.step(DefaultBackoff.Initial)
	s.wantCalls("start i1#2")
	s.exit("i1", 0)
	s.wantCalls("start a#0")
}

// A sidecar (an init container with restartPolicy Always) keeps running
// next to the main containers; the init container after it waits until it
// runs and has passed its startup probe, as with the kubelet.
func TestSidecarStartupGatesNextInit(t *testing.T) {
	side := sidecar("side")
	side.StartupProbe = startupProbe()
	s := newScenario(t, withInit(testPod("a"), side, v1.Container{Name: "i2"}))
	s.wantCalls("start side#0")
	if c := s.container("side"); c.Started == nil || *c.Started || c.Ready {
		t.Fatalf("sidecar before its startup probe: %+v", c)
	}
	s.probe("side", probes.Startup, true)
	s.wantCalls("start i2#0")
	if c := s.container("side"); !*c.Started || !c.Ready {
		t.Fatalf("sidecar after its startup probe: %+v", c)
	}
	s.exit("i2", 0)
	s.wantCalls("start a#0")

	// A sidecar that exits is restarted while the main containers run,
	// even in a pod that never restarts.
	s.exit("side", 1)
	s.wantCalls("start side#1")
	// Once the main containers are done, the sidecar is stopped and the
	// pod ends.
	s.exit("a", 0)
	s.wantCalls("stop side 30s")
	s.wantPhase(v1.PodSucceeded)
}

// Sidecars without a startup probe count as started at once: the next init
// container starts in the same sync.
func TestSidecarWithoutStartupProbe(t *testing.T) {
	s := newScenario(t, withInit(testPod("a"), sidecar("s1"), sidecar("s2"), v1.Container{Name: "i"}))
	s.wantCalls("start s1#0", "start s2#0", "start i#0")
	s.exit("i", 0)
	s.wantCalls("start a#0")
	if c := s.status().Conditions; podCondition(s.status(), v1.PodInitialized).Status != v1.ConditionTrue {
		t.Errorf("Initialized not true: %+v", c)
	}
}

// A regular init container's startup probe does not gate the next one:
// only its completion does.
func TestInitContainerRunningBlocksMain(t *testing.T) {
	s := newScenario(t, withInit(testPod("a"), v1.Container{Name: "i"}))
	s.wantCalls("start i#0")
	s.step(DefaultBackoff.Max)
	s.wantCalls()
	s.wantWaiting("a", "PodInitializing")
}

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hostlet/hostlet/probes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A crashing container is restarted at once the first time, then after 10 s
// doubling to 300 s, waiting as CrashLoopBackOff with one BackOff event; a
// run of 10 min resets the back-off. Each delay is recorded with the
// container for a restarted hostlet.
func TestCrashLoopBackOffThroughWorker(t *testing.T) {
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	s.calls("start")
	s.exit("a", 1)
	s.wantCalls("start a#1")
	for i, wait := range []time.Duration{10, 20, 40, 80, 160, 300, 300} {
		wait *= time.Second
		s.exit("a", 1)
		s.wantWaiting("a", "CrashLoopBackOff")
		if c := s.container("a"); c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 1 {
			t.Fatalf("waiting container shows no exit: %+v", c)
		}
		s.step(wait - time.Second)
		s.wantCalls()
		s.step(time.Second)
		s.wantCalls(fmt.Sprintf("start a#%d", i+2))
	}
	if got := s.calls("backoff"); len(got) != 8 || got[7] != "backoff id8 5m0s 5m0s" {
		t.Errorf("recorded back-offs %q", got)
	}
	backOffs := 0
	for _, e := range s.events() {
		if e == "Warning BackOff: Back-off restarting failed container a in pod p_ns(uid-1)" {
			backOffs++
		}
	}
	if backOffs != 7 {
		t.Errorf("%d BackOff events, want one per wait", backOffs)
	}
	// Ten minutes of running start the back-off over.
	s.step(DefaultBackoff.ResetAfter)
	s.exit("a", 1)
	s.wantCalls(fmt.Sprintf("start a#%d", 9))
	if s.container("a").RestartCount != 9 {
		t.Errorf("restartCount %d", s.container("a").RestartCount)
	}
}

// The pod's restartPolicy decides for each exit code; a pod whose
// containers are done for good ends Succeeded or Failed.
func TestRestartPolicyThroughWorker(t *testing.T) {
	for _, tc := range []struct {
		policy  v1.RestartPolicy
		code    int32
		restart bool
		phase   v1.PodPhase
	}{
		{v1.RestartPolicyAlways, 0, true, v1.PodRunning},
		{v1.RestartPolicyAlways, 1, true, v1.PodRunning},
		{v1.RestartPolicyOnFailure, 0, false, v1.PodSucceeded},
		{v1.RestartPolicyOnFailure, 1, true, v1.PodRunning},
		{v1.RestartPolicyNever, 0, false, v1.PodSucceeded},
		{v1.RestartPolicyNever, 1, false, v1.PodFailed},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.policy, tc.code), func(t *testing.T) {
			s := newScenario(t, restartPolicy(testPod("a"), tc.policy))
			s.calls("start")
			s.exit("a", tc.code)
			if tc.restart {
				s.wantCalls("start a#1")
			} else {
				s.wantCalls()
			}
			s.wantPhase(tc.phase)
			if tc.phase != v1.PodRunning && s.rt.SandboxReady(s.w.Object()) {
				t.Error("sandbox kept after the pod ended")
			}
		})
	}
}

// A container's restartPolicyRules (1.35 ContainerRestartRules) decide
// before its restartPolicy: an exit code they list restarts the container
// in a pod that never restarts; others end it.
func TestRestartPolicyRulesThroughWorker(t *testing.T) {
	pod := testPod("a")
	pod.Spec.Containers[0].RestartPolicy = policy(v1.ContainerRestartPolicyNever)
	pod.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	s := newScenario(t, pod)
	s.calls("start")
	s.exit("a", 42)
	s.wantCalls("start a#1")
	s.exit("a", 42)
	s.wantWaiting("a", "CrashLoopBackOff")
	s.step(DefaultBackoff.Initial)
	s.wantCalls("start a#2")
	s.exit("a", 1)
	s.wantCalls()
	s.wantPhase(v1.PodFailed)
}

// A failed liveness probe kills the container with the probe's own grace
// period and a Killing event; the restart policy then restarts it. The
// back-off follows the kubelet's probe-kill rule: the first two kills
// restart at once, a third within 10 s of the previous exit waits 10 s.
func TestLivenessKillRestarts(t *testing.T) {
	pod := restartPolicy(testPod("a"), v1.RestartPolicyAlways)
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{
		ProbeHandler:                  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		TerminationGracePeriodSeconds: int64p(5),
	}
	s := newScenario(t, pod)
	s.calls("start")
	s.probe("a", probes.Liveness, false)
	s.wantCalls("stop a 5s", "start a#1")
	s.wantEvent("Normal Killing: Container a failed liveness probe, will be restarted")
	s.step(2 * time.Second)
	s.probe("a", probes.Liveness, false)
	s.wantCalls("stop a 5s", "start a#2")
	s.step(2 * time.Second)
	s.probe("a", probes.Liveness, false)
	s.wantCalls("stop a 5s")
	s.wantWaiting("a", "CrashLoopBackOff")
	s.step(10 * time.Second)
	s.wantCalls("start a#3")
}

// A failed startup probe kills the container too; in a pod that never
// restarts it ends there. Readiness only follows its probe.
func TestStartupAndReadinessProbes(t *testing.T) {
	pod := testPod("a")
	pod.Spec.Containers[0].StartupProbe = startupProbe()
	pod.Spec.Containers[0].ReadinessProbe = startupProbe()
	s := newScenario(t, pod)
	s.calls("start")
	if c := s.container("a"); *c.Started || c.Ready {
		t.Fatalf("before the startup probe: %+v", c)
	}
	s.probe("a", probes.Startup, true)
	if c := s.container("a"); !*c.Started || c.Ready {
		t.Fatalf("started, not yet ready: %+v", c)
	}
	s.probe("a", probes.Readiness, true)
	if c := s.container("a"); !c.Ready || podCondition(s.status(), v1.PodReady).Status != v1.ConditionTrue {
		t.Fatalf("ready: %+v", c)
	}
	s.probe("a", probes.Readiness, false)
	if s.container("a").Ready {
		t.Fatal("still ready after the readiness probe failed")
	}

	pod = testPod("a")
	pod.Spec.Containers[0].StartupProbe = startupProbe()
	s = newScenario(t, pod)
	s.calls("start")
	s.probe("a", probes.Startup, false)
	s.wantCalls("stop a 30s")
	s.wantEvent("Normal Killing: Container a failed startup probe")
	s.wantPhase(v1.PodFailed)
}

// An image that cannot be pulled waits as ErrImagePull, then (at the next
// sync) ImagePullBackOff, and the pull is retried after 10 s, then 20 s.
func TestImagePullBackOffThroughWorker(t *testing.T) {
	s := newScenario(t, testPod("a"), func(s *scenario) {
		s.rt.failStart["a"] = &Failure{Reason: "ErrImagePull", Message: "not found"}
	})
	s.wantCalls("start a#0")
	s.wantWaiting("a", "ErrImagePull")
	s.wantEvent("Warning Failed: Error: ErrImagePull")
	// A pod update (as the written status comes back) syncs during the wait.
	s.w.Update(s.w.Object())
	s.settle()
	s.wantWaiting("a", "ImagePullBackOff")
	s.wantEvent(`Normal BackOff: Back-off pulling image "img"`)
	s.step(10 * time.Second)
	s.wantCalls("start a#0")
	s.step(19 * time.Second)
	s.wantCalls()
	s.rt.mu.Lock()
	delete(s.rt.failStart, "a")
	s.rt.mu.Unlock()
	s.step(time.Second)
	s.wantCalls("start a#0")
	s.wantPhase(v1.PodRunning)
}

// A pull that failed for an image volume's image, not the container's,
// backs off naming that image, as the kubelet's image puller does.
func TestImageVolumePullBackOff(t *testing.T) {
	s := newScenario(t, testPod("a"), func(s *scenario) {
		s.rt.failStart["a"] = &Failure{Reason: "ErrImagePull", Message: "not found", Image: "vol:1"}
	})
	s.wantCalls("start a#0")
	s.wantWaiting("a", "ErrImagePull")
	s.w.Update(s.w.Object())
	s.settle()
	s.wantWaiting("a", "ImagePullBackOff")
	s.wantEvent(`Normal BackOff: Back-off pulling image "vol:1"`)
	if w := s.container("a").State.Waiting; w.Message != `Back-off pulling image "vol:1": not found` {
		t.Errorf("waiting message %q", w.Message)
	}
}

// A container that could not be made (a missing ConfigMap) is retried
// every 10 s, as the kubelet's pod worker retries a failed sync: never
// sooner, and not backing off, so the object created late is picked up.
func TestConfigErrorRetry(t *testing.T) {
	s := newScenario(t, testPod("a"), func(s *scenario) {
		s.rt.failStart["a"] = &Failure{Reason: "CreateContainerConfigError", Message: `configmap "x" not found`}
	})
	s.wantCalls("start a#0")
	s.wantWaiting("a", "CreateContainerConfigError")
	for range 3 {
		s.step(10*time.Second - time.Millisecond)
		s.wantCalls()
		s.step(time.Millisecond)
		s.wantCalls("start a#0")
		s.wantWaiting("a", "CreateContainerConfigError")
	}
}

// A sandbox that cannot be set up is retried after 1 s, doubling, with a
// FailedCreatePodSandBox event; nothing starts before it is up.
func TestSandboxRetry(t *testing.T) {
	s := newScenario(t, testPod("a"), func(s *scenario) { s.rt.failSandbox = errors.New("cni: no IP") })
	s.wantEvent("Warning FailedCreatePodSandBox: Failed to create pod sandbox: cni: no IP")
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if got := s.calls("sandbox", "start"); len(got) != 1 || got[0] != "sandbox" {
			t.Fatalf("calls %q, want one sandbox setup", got)
		}
		s.step(d - time.Millisecond)
		if got := s.calls("sandbox"); len(got) != 0 {
			t.Fatalf("sandbox retried before %v", d)
		}
		s.step(time.Millisecond)
	}
	// The last failure (at 7 s) waits 8 s.
	s.rt.mu.Lock()
	s.rt.failSandbox = nil
	s.rt.mu.Unlock()
	s.step(8 * time.Second)
	if got := s.calls("sandbox", "start"); len(got) != 3 || got[2] != "start a#0" {
		t.Fatalf("calls %q after the sandbox came up", got)
	}
}

// A running container whose image a pod update changes is killed ("definition
// changed") and started again with the new image at once, whatever the
// restart policy, as the kubelet does: main containers and sidecars; an
// init container still running and an exited container are left alone.
func TestImageChangeRestarts(t *testing.T) {
	pod := withInit(restartPolicy(testPod("app", "done"), v1.RestartPolicyNever), sidecar("side"))
	s := newScenario(t, pod)
	s.exit("done", 0)
	s.calls("start", "stop")
	upd := s.w.Object().DeepCopy()
	upd.Spec.InitContainers[0].Image = "img:2"
	upd.Spec.Containers[0].Image = "img:2"
	upd.Spec.Containers[1].Image = "img:2"
	s.w.Update(upd)
	s.settle()
	s.wantCalls("stop side 30s", "stop app 30s", "start side#1", "start app#1")
	for _, name := range []string{"side", "app"} {
		if c := s.container(name); c.State.Running == nil || c.RestartCount != 1 || c.Image != "img:2" {
			t.Errorf("%s after the image change: %+v", name, c)
		}
	}
	if c := s.container("done"); c.State.Terminated == nil || c.RestartCount != 0 {
		t.Errorf("exited container restarted: %+v", c)
	}
	s.wantEvent("Normal Killing: Container app definition changed, will be restarted")
	s.wantPhase(v1.PodRunning)
	// Exits after that follow the restart policy again: the pod is done,
	// its sidecar stopped.
	s.exit("app", 0)
	s.wantCalls("stop side 30s")
	s.wantPhase(v1.PodSucceeded)
}

// A static pod put back in its source runs again with the same UID: its
// containers' attempts go on from the earlier run's final status and show
// its last termination, as the kubelet's do from the dead containers it
// keeps; a container that never ran there starts at attempt 0.
func TestPreviousRunContinues(t *testing.T) {
	done := metav1.NewTime(epoch.Add(-time.Second))
	prev := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
		{Name: "a", RestartCount: 2, ContainerID: "containerd://old", State: v1.ContainerState{
			Terminated: &v1.ContainerStateTerminated{ExitCode: 2, ContainerID: "containerd://old", FinishedAt: done}}},
		{Name: "b", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
	}}
	s := newScenario(t, restartPolicy(testPod("a", "b"), v1.RestartPolicyAlways), func(s *scenario) { s.previous = prev })
	s.wantCalls("start a#3", "start b#0")
	a := s.container("a")
	if a.RestartCount != 3 || a.LastTerminationState.Terminated == nil || a.LastTerminationState.Terminated.ExitCode != 2 {
		t.Errorf("a continues %+v", a)
	}
	if b := s.container("b"); b.RestartCount != 0 || b.LastTerminationState.Terminated != nil {
		t.Errorf("b %+v", b)
	}
}

// A container waiting out its crash-loop back-off whose image a pod update
// changes starts at once with the new image, as the kubelet's back-off is
// keyed by the container's hash.
func TestImageChangeEndsBackOff(t *testing.T) {
	s := newScenario(t, restartPolicy(testPod("a"), v1.RestartPolicyAlways))
	s.calls("start")
	s.exit("a", 1)
	s.exit("a", 1)
	s.wantWaiting("a", "CrashLoopBackOff")
	s.calls("start")
	upd := s.w.Object().DeepCopy()
	upd.Spec.Containers[0].Image = "img:2"
	s.w.Update(upd)
	s.settle()
	s.wantCalls("start a#2")
	if c := s.container("a"); c.State.Running == nil || c.Image != "img:2" {
		t.Errorf("after the image change: %+v", c)
	}
}

// While a container its liveness probe failed is killed (its preStop hook
// running), its readiness probe goes on, as the kubelet's; it stops once
// the container has exited.
func TestReadinessProbedThroughLivenessKill(t *testing.T) {
	pod := testPod("a")
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	pod.Spec.Containers[0].LivenessProbe, pod.Spec.Containers[0].ReadinessProbe = probe, probe.DeepCopy()
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep"}}}}
	s := newScenario(t, pod)
	readyDuringHook := make(chan bool, 1)
	s.pr.hook = func(ctx context.Context, what string) error {
		readyDuringHook <- s.pr.running("a", probes.Readiness)
		return nil
	}
	s.probe("a", probes.Liveness, false)
	if !<-readyDuringHook {
		t.Error("the readiness probe was stopped before the preStop hook of a liveness kill")
	}
	// The runtime's exit event of the killed instance.
	s.rt.mu.Lock()
	var killed ContainerInfo
	for _, c := range s.rt.containers {
		if c.Name == "a" {
			killed = c
		}
	}
	s.rt.mu.Unlock()
	s.w.Exited(killed)
	s.settle()
	if s.pr.running("a", probes.Readiness) {
		t.Error("the readiness probe of an exited container still runs")
	}
}

// A container its liveness probe failed is restarted in a restartPolicy
// OnFailure pod even when its process exits 0 on the SIGTERM, as the
// kubelet decides the restart before the kill; under Never it is not.
func TestProbeKillRestartsWhateverTheExit(t *testing.T) {
	for policy, restarts := range map[v1.RestartPolicy]bool{v1.RestartPolicyOnFailure: true, v1.RestartPolicyNever: false} {
		pod := restartPolicy(testPod("a"), policy)
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
		s := newScenario(t, pod, func(s *scenario) { s.rt.stopCodes = map[string]int32{"a": 0} })
		s.calls("start")
		s.probe("a", probes.Liveness, false)
		got := s.calls("start")
		if restarts && (len(got) != 1 || got[0] != "start a#1") {
			t.Errorf("%s: starts %q after the kill, want a#1", policy, got)
		}
		if !restarts && len(got) != 0 {
			t.Errorf("%s: starts %q after the kill, want none", policy, got)
		}
	}
}

package lifecycle

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func policy(p v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &p }

func running() v1.ContainerStatus {
	t := true
	return v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, Started: &t, Ready: true}
}

func exited(code int32) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

func waiting(reason string) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}}
}

func restarting(lastCode int32) v1.ContainerStatus {
	s := waiting("CrashLoopBackOff")
	s.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: lastCode}
	return s
}

func named(s v1.ContainerStatus, name string) v1.ContainerStatus { s.Name = name; return s }

func TestShouldRestart(t *testing.T) {
	never := policy(v1.ContainerRestartPolicyNever)
	rules := []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	notIn := []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0, 1}},
	}}
	for _, tc := range []struct {
		name string
		pod  v1.RestartPolicy
		c    v1.Container
		code int32
		want bool
	}{
		{"always on success", v1.RestartPolicyAlways, v1.Container{}, 0, true},
		{"default policy is always", "", v1.Container{}, 1, true},
		{"onfailure on success", v1.RestartPolicyOnFailure, v1.Container{}, 0, false},
		{"onfailure on failure", v1.RestartPolicyOnFailure, v1.Container{}, 2, true},
		{"never", v1.RestartPolicyNever, v1.Container{}, 2, false},
		{"container never overrides pod always", v1.RestartPolicyAlways, v1.Container{RestartPolicy: never}, 1, false},
		{"container always overrides pod never", v1.RestartPolicyNever, v1.Container{RestartPolicy: policy(v1.ContainerRestartPolicyAlways)}, 0, true},
		{"container onfailure", v1.RestartPolicyNever, v1.Container{RestartPolicy: policy(v1.ContainerRestartPolicyOnFailure)}, 3, true},
		{"rule In matches", v1.RestartPolicyNever, v1.Container{RestartPolicy: never, RestartPolicyRules: rules}, 42, true},
		{"rule In misses", v1.RestartPolicyNever, v1.Container{RestartPolicy: never, RestartPolicyRules: rules}, 41, false},
		{"rule NotIn matches", v1.RestartPolicyNever, v1.Container{RestartPolicy: never, RestartPolicyRules: notIn}, 7, true},
		{"rule NotIn misses", v1.RestartPolicyNever, v1.Container{RestartPolicy: never, RestartPolicyRules: notIn}, 1, false},
		{"rules ignored without container policy", v1.RestartPolicyNever, v1.Container{RestartPolicyRules: rules}, 42, false},
	} {
		spec := &v1.PodSpec{RestartPolicy: tc.pod}
		if got := ShouldRestart(&tc.c, spec, tc.code); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPhase(t *testing.T) {
	main := []v1.Container{{Name: "a"}, {Name: "b"}}
	sidecar := v1.Container{Name: "side", RestartPolicy: policy(v1.ContainerRestartPolicyAlways)}
	for _, tc := range []struct {
		name        string
		policy      v1.RestartPolicy
		init        []v1.Container
		initSt, st  []v1.ContainerStatus
		terminal    bool
		initialized bool
		want        v1.PodPhase
	}{
		{name: "nothing yet", policy: v1.RestartPolicyAlways, st: nil, want: v1.PodPending},
		{name: "creating", policy: v1.RestartPolicyAlways, st: []v1.ContainerStatus{named(waiting("ContainerCreating"), "a"), named(waiting("ContainerCreating"), "b")}, want: v1.PodPending},
		{name: "all running", policy: v1.RestartPolicyAlways, st: []v1.ContainerStatus{named(running(), "a"), named(running(), "b")}, want: v1.PodRunning},
		{name: "one running one exited ok", policy: v1.RestartPolicyNever, st: []v1.ContainerStatus{named(running(), "a"), named(exited(0), "b")}, want: v1.PodRunning},
		{name: "all succeeded never", policy: v1.RestartPolicyNever, st: []v1.ContainerStatus{named(exited(0), "a"), named(exited(0), "b")}, want: v1.PodSucceeded},
		{name: "one failed never", policy: v1.RestartPolicyNever, st: []v1.ContainerStatus{named(exited(1), "a"), named(exited(0), "b")}, want: v1.PodFailed},
		{name: "failed onfailure restarts", policy: v1.RestartPolicyOnFailure, st: []v1.ContainerStatus{named(restarting(1), "a"), named(exited(0), "b")}, want: v1.PodRunning},
		{name: "all succeeded onfailure", policy: v1.RestartPolicyOnFailure, st: []v1.ContainerStatus{named(exited(0), "a"), named(exited(0), "b")}, want: v1.PodSucceeded},
		{name: "crashloop always is running", policy: v1.RestartPolicyAlways, st: []v1.ContainerStatus{named(restarting(1), "a"), named(restarting(0), "b")}, want: v1.PodRunning},
		{name: "terminal with failures", policy: v1.RestartPolicyAlways, terminal: true, st: []v1.ContainerStatus{named(exited(143), "a"), named(exited(0), "b")}, want: v1.PodFailed},
		{name: "terminal all ok", policy: v1.RestartPolicyAlways, terminal: true, st: []v1.ContainerStatus{named(exited(0), "a"), named(exited(0), "b")}, want: v1.PodSucceeded},
		{name: "init running", policy: v1.RestartPolicyAlways, init: []v1.Container{{Name: "i"}}, initSt: []v1.ContainerStatus{named(running(), "i")}, st: []v1.ContainerStatus{named(waiting("PodInitializing"), "a"), named(waiting("PodInitializing"), "b")}, want: v1.PodPending},
		{name: "init failed never", policy: v1.RestartPolicyNever, init: []v1.Container{{Name: "i"}}, initSt: []v1.ContainerStatus{named(exited(1), "i")}, st: []v1.ContainerStatus{named(waiting("PodInitializing"), "a"), named(waiting("PodInitializing"), "b")}, want: v1.PodFailed},
		{name: "init failed always retries", policy: v1.RestartPolicyAlways, init: []v1.Container{{Name: "i"}}, initSt: []v1.ContainerStatus{named(restarting(1), "i")}, st: []v1.ContainerStatus{named(waiting("PodInitializing"), "a"), named(waiting("PodInitializing"), "b")}, want: v1.PodPending},
		{name: "sidecar running, main done", policy: v1.RestartPolicyNever, init: []v1.Container{sidecar}, initSt: []v1.ContainerStatus{named(running(), "side")}, st: []v1.ContainerStatus{named(exited(0), "a"), named(exited(0), "b")}, initialized: true, want: v1.PodRunning},
		{name: "sidecar stopped, main done", policy: v1.RestartPolicyNever, init: []v1.Container{sidecar}, initSt: []v1.ContainerStatus{named(exited(137), "side")}, st: []v1.ContainerStatus{named(exited(0), "a"), named(exited(0), "b")}, initialized: true, terminal: true, want: v1.PodSucceeded},
	} {
		spec := &v1.PodSpec{RestartPolicy: tc.policy, InitContainers: tc.init, Containers: main}
		if got := Phase(spec, tc.initSt, tc.st, tc.terminal, tc.initialized); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestConditions(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers:     []v1.Container{{Name: "a"}, {Name: "b"}},
		InitContainers: []v1.Container{{Name: "i"}},
		ReadinessGates: []v1.PodReadinessGate{{ConditionType: "example.com/gate"}},
	}}
	find := func(cs []v1.PodCondition, t v1.PodConditionType) v1.PodCondition {
		for _, c := range cs {
			if c.Type == t {
				return c
			}
		}
		return v1.PodCondition{}
	}
	initDone := named(exited(0), "i")
	initDone.Ready = true

	initRunning := named(running(), "i")
	initRunning.Ready = false
	cs := Conditions(pod, []v1.ContainerStatus{initRunning}, []v1.ContainerStatus{named(waiting("PodInitializing"), "a"), named(waiting("PodInitializing"), "b")}, v1.PodPending, true, nil)
	if c := find(cs, v1.PodInitialized); c.Status != v1.ConditionFalse || c.Reason != ReasonContainersNotInitialized || c.Message != "containers with incomplete status: [i]" {
		t.Errorf("Initialized = %+v", c)
	}
	if c := find(cs, v1.ContainersReady); c.Message != "containers with unready status: [a b]" {
		t.Errorf("ContainersReady = %+v", c)
	}

	unready := named(running(), "b")
	unready.Ready = false
	cs = Conditions(pod, []v1.ContainerStatus{initDone}, []v1.ContainerStatus{named(running(), "a"), unready}, v1.PodRunning, true, nil)
	if c := find(cs, v1.PodReady); c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [b]" {
		t.Errorf("Ready = %+v", c)
	}

	all := []v1.ContainerStatus{named(running(), "a"), named(running(), "b")}
	cs = Conditions(pod, []v1.ContainerStatus{initDone}, all, v1.PodRunning, true, nil)
	if c := find(cs, v1.PodReady); c.Reason != ReasonReadinessGatesNotReady || c.Message != `corresponding condition of pod readiness gate "example.com/gate" does not exist.` {
		t.Errorf("Ready without gate = %+v", c)
	}
	if c := find(cs, v1.ContainersReady); c.Status != v1.ConditionTrue {
		t.Errorf("ContainersReady = %+v", c)
	}
	gate := []v1.PodCondition{{Type: "example.com/gate", Status: v1.ConditionTrue}}
	cs = Conditions(pod, []v1.ContainerStatus{initDone}, all, v1.PodRunning, true, gate)
	if c := find(cs, v1.PodReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready with gate = %+v", c)
	}

	cs = Conditions(pod, []v1.ContainerStatus{initDone}, []v1.ContainerStatus{named(exited(0), "a"), named(exited(0), "b")}, v1.PodSucceeded, false, nil)
	if c := find(cs, v1.PodReady); c.Reason != ReasonPodCompleted {
		t.Errorf("Ready of completed pod = %+v", c)
	}
	if c := find(cs, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Errorf("PodReadyToStartContainers without sandbox = %+v", c)
	}

	// Others' conditions survive a merge; ours keep their transition time
	// while unchanged.
	merged := MergeConditions(cs, append(gate, v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: mustTime("2020-01-01T00:00:00Z")}), mustTime("2021-01-01T00:00:00Z"))
	if c := find(merged, "example.com/gate"); c.Status != v1.ConditionTrue {
		t.Errorf("gate condition lost in merge: %+v", merged)
	}
	if c := find(merged, v1.PodReady); !c.LastTransitionTime.Equal(ptr(mustTime("2020-01-01T00:00:00Z"))) {
		t.Errorf("Ready transition time changed: %v", c.LastTransitionTime)
	}
}

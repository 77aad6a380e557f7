package lifecycle

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusPod is a pod worker in a given state, for status generation only.
func statusPod(spec v1.PodSpec, recs map[string]*container, sandboxOK, finished bool) *Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: spec, Status: v1.PodStatus{Phase: v1.PodRunning}}
	p := NewPod(pod, Config{})
	p.pod = pod
	p.containers = recs
	p.sandboxOK, p.finished, p.initialized = sandboxOK, finished, true
	p.startTime = metav1.Now()
	return p
}

func instance(id string, attempt int, running bool, code int32) ContainerInfo {
	t := time.Unix(1000+int64(attempt)*10, 0)
	info := ContainerInfo{ID: id, Name: "c", Attempt: attempt, Running: running, StartedAt: t}
	if !running {
		info.Exited, info.ExitCode, info.FinishedAt = true, code, t.Add(time.Second)
	}
	return info
}

func podCondition(st v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}

// The kubelet's status rules for a container across restarts and for the
// pod's end: lastState is the instance before the newest one the runtime
// keeps (only while the newest runs, or its own exit while it waits for a
// restart); the phase turns terminal only once everything is stopped, with
// PodReadyToStartContainers False since the sandbox is gone.
func TestStatusGeneration(t *testing.T) {
	onFailure := v1.PodSpec{RestartPolicy: v1.RestartPolicyOnFailure, Containers: []v1.Container{{Name: "c", Image: "busybox"}}}
	never := v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox"}}}
	prevFail := instance("a", 0, false, 1)
	for _, tc := range []struct {
		name      string
		spec      v1.PodSpec
		rec       container
		sandboxOK bool
		finished  bool

		phase        v1.PodPhase
		state        string // running, waiting, terminated
		lastExitCode *int32
		restarts     int32
		readyToStart v1.ConditionStatus
		ready        v1.ConditionStatus
		readyReason  string
	}{
		{
			name: "running after a restart shows the previous exit",
			spec: onFailure, rec: container{cur: instance("b", 1, true, 0), prev: &prevFail, started: true},
			sandboxOK: true, phase: v1.PodRunning, state: "running", lastExitCode: ptr32(1), restarts: 1,
			readyToStart: v1.ConditionTrue, ready: v1.ConditionTrue,
		},
		{
			name: "waiting for a restart shows its own exit",
			spec: onFailure,
			rec: container{cur: instance("b", 1, false, 2), prev: &prevFail,
				waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			sandboxOK: true, phase: v1.PodRunning, state: "waiting", lastExitCode: ptr32(2), restarts: 1,
			readyToStart: v1.ConditionTrue, ready: v1.ConditionFalse, readyReason: ReasonContainersNotReady,
		},
		{
			name: "terminal after an earlier restart: no lastState",
			spec: onFailure, rec: container{cur: instance("b", 1, false, 0), prev: &prevFail},
			finished: true, phase: v1.PodSucceeded, state: "terminated", restarts: 1,
			readyToStart: v1.ConditionFalse, ready: v1.ConditionFalse, readyReason: ReasonPodCompleted,
		},
		{
			name: "failed for good after a restart: no lastState",
			spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox",
				RestartPolicy: policy(v1.ContainerRestartPolicyNever)}}},
			rec:      container{cur: instance("b", 1, false, 3), prev: &prevFail},
			finished: true, phase: v1.PodFailed, state: "terminated", restarts: 1,
			readyToStart: v1.ConditionFalse, ready: v1.ConditionFalse, readyReason: ReasonPodFailed,
		},
		{
			name: "done but not yet stopped: the phase waits, the sandbox is still there",
			spec: never, rec: container{cur: instance("a", 0, false, 0)},
			sandboxOK: true, phase: v1.PodRunning, state: "terminated",
			readyToStart: v1.ConditionTrue, ready: v1.ConditionFalse, readyReason: ReasonPodCompleted,
		},
		{
			name: "done and stopped: terminal, not ready to start containers",
			spec: never, rec: container{cur: instance("a", 0, false, 0)},
			finished: true, phase: v1.PodSucceeded, state: "terminated",
			readyToStart: v1.ConditionFalse, ready: v1.ConditionFalse, readyReason: ReasonPodCompleted,
		},
		{
			name: "created after a restart, not yet running, keeps the previous exit",
			spec: onFailure, rec: container{cur: ContainerInfo{ID: "b", Name: "c", Attempt: 1}, prev: &prevFail},
			sandboxOK: true, phase: v1.PodRunning, state: "waiting", lastExitCode: ptr32(1), restarts: 1,
			readyToStart: v1.ConditionTrue, ready: v1.ConditionFalse, readyReason: ReasonContainersNotReady,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			rec.name = "c"
			p := statusPod(tc.spec, map[string]*container{"c": &rec}, tc.sandboxOK, tc.finished)
			st := p.computeStatus()
			if st.Phase != tc.phase {
				t.Errorf("phase %s, want %s", st.Phase, tc.phase)
			}
			if len(st.ContainerStatuses) != 1 {
				t.Fatalf("container statuses %+v", st.ContainerStatuses)
			}
			cs := st.ContainerStatuses[0]
			state := ""
			switch {
			case cs.State.Running != nil:
				state = "running"
			case cs.State.Waiting != nil:
				state = "waiting"
			case cs.State.Terminated != nil:
				state = "terminated"
			}
			if state != tc.state {
				t.Errorf("state %s, want %s (%+v)", state, tc.state, cs.State)
			}
			last := cs.LastTerminationState.Terminated
			switch {
			case tc.lastExitCode == nil && last != nil:
				t.Errorf("lastState %+v, want none", last)
			case tc.lastExitCode != nil && (last == nil || last.ExitCode != *tc.lastExitCode):
				t.Errorf("lastState %+v, want exit %d", last, *tc.lastExitCode)
			}
			if cs.RestartCount != tc.restarts {
				t.Errorf("restartCount %d, want %d", cs.RestartCount, tc.restarts)
			}
			if c := podCondition(st, v1.PodReadyToStartContainers); c.Status != tc.readyToStart {
				t.Errorf("PodReadyToStartContainers %s, want %s", c.Status, tc.readyToStart)
			}
			if c := podCondition(st, v1.PodReady); c.Status != tc.ready || c.Reason != tc.readyReason {
				t.Errorf("Ready %s/%s, want %s/%s", c.Status, c.Reason, tc.ready, tc.readyReason)
			}
		})
	}
}

// A pod failed by the node (deadline, shutdown) reports its reason only
// together with its terminal phase.
func TestStatusFailureReason(t *testing.T) {
	spec := v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}}
	rec := &container{name: "c", cur: instance("a", 0, false, 137)}
	p := statusPod(spec, map[string]*container{"c": rec}, false, true)
	p.failure = &StopRequest{Reason: "DeadlineExceeded", Message: "too long"}
	st := p.computeStatus()
	if st.Phase != v1.PodFailed || st.Reason != "DeadlineExceeded" || st.Message != "too long" {
		t.Fatalf("phase %s reason %q message %q", st.Phase, st.Reason, st.Message)
	}
	if c := podCondition(st, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Errorf("PodReadyToStartContainers %s", c.Status)
	}
}

// The claims' statuses are the controllers': a status without them is one
// NodeRestriction refuses.
func TestStatusKeepsResourceClaimStatuses(t *testing.T) {
	spec := v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}}
	p := statusPod(spec, map[string]*container{"c": {name: "c"}}, false, false)
	claim := "pod-gpu-x7k2q"
	p.pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claim}}
	p.pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "pod-extended-resources-abcde"}
	st := p.computeStatus()
	if !equality.Semantic.DeepEqual(st.ResourceClaimStatuses, p.pod.Status.ResourceClaimStatuses) ||
		!equality.Semantic.DeepEqual(st.ExtendedResourceClaimStatus, p.pod.Status.ExtendedResourceClaimStatus) {
		t.Fatalf("claim statuses %+v %+v, want the API's", st.ResourceClaimStatuses, st.ExtendedResourceClaimStatus)
	}
}

func ptr32(v int32) *int32 { return &v }

// status.volumeMounts come from Config.VolumeMounts for every container,
// waiting ones too, as the kubelet's; status.user is the runtime's, for an
// instance that exists.
func TestStatusVolumeMountsAndUser(t *testing.T) {
	spec := v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "c", Image: "busybox"}, {Name: "w", Image: "busybox"}}}
	run := instance("a", 0, true, 0)
	run.User = &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000, 60000}}}
	p := statusPod(spec, map[string]*container{"c": {name: "c", cur: run}}, true, false)
	mode := v1.RecursiveReadOnlyEnabled
	p.cfg.VolumeMounts = func(_ *v1.Pod, c *v1.Container) []v1.VolumeMountStatus {
		return []v1.VolumeMountStatus{{Name: "v-" + c.Name, MountPath: "/v", ReadOnly: true, RecursiveReadOnly: &mode}}
	}
	st := p.computeStatus()
	byName := map[string]v1.ContainerStatus{}
	for _, s := range st.ContainerStatuses {
		byName[s.Name] = s
	}
	for _, n := range []string{"c", "w"} {
		if vm := byName[n].VolumeMounts; len(vm) != 1 || vm[0].Name != "v-"+n || *vm[0].RecursiveReadOnly != mode {
			t.Errorf("%s: volumeMounts %+v", n, vm)
		}
	}
	if u := byName["c"].User; u == nil || u.Linux.UID != 1000 || len(u.Linux.SupplementalGroups) != 2 {
		t.Errorf("running container's user %+v", u)
	}
	if u := byName["w"].User; u != nil {
		t.Errorf("waiting container's user %+v, want none", u)
	}
}

// Init container statuses come in the spec's order, as the kubelet's
// SortStatusesOfInitContainers lists them (the node e2e suite reads them by
// index); main containers' sorted by name.
func TestStatusOrder(t *testing.T) {
	pod := withInit(testPod("b", "a"), v1.Container{Name: "z-init", Command: []string{"x"}}, sidecar("a-side"))
	s := newScenario(t, pod)
	st := s.status()
	var inits, mains []string
	for _, c := range st.InitContainerStatuses {
		inits = append(inits, c.Name)
	}
	for _, c := range st.ContainerStatuses {
		mains = append(mains, c.Name)
	}
	if !slices.Equal(inits, []string{"z-init", "a-side"}) || !slices.Equal(mains, []string{"a", "b"}) {
		t.Errorf("init statuses %q, main %q", inits, mains)
	}
}

package lifecycle

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func resources(cpuReq, cpuLim, memReq, memLim string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// resizablePod is a running Burstable pod whose containers have the given
// resources.
func resizablePod(res ...v1.ResourceRequirements) *v1.Pod {
	names := []string{"a", "b"}
	pod := restartPolicy(testPod(names[:len(res)]...), v1.RestartPolicyAlways)
	pod.Generation = 1
	for i := range res {
		pod.Spec.Containers[i].Resources = res[i]
	}
	return pod
}

// resized is the pod at generation 2 with container i's resources r.
func resized(pod *v1.Pod, i int, r v1.ResourceRequirements) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Generation++
	pod.Spec.Containers[i].Resources = r
	return pod
}

func (s *scenario) condition(t v1.PodConditionType) *v1.PodCondition {
	for _, c := range s.status().Conditions {
		if c.Type == t {
			return &c
		}
	}
	return nil
}

// admit is the node admitting the resize of pod.
func (s *scenario) admit(pod *v1.Pod) {
	s.w.Update(pod)
	s.w.allocate(AllocationOf(pod), pod.Generation)
	s.settle()
}

// An admitted resize of a container whose policy is NotRequired is applied
// live: no restart, the status reports the new resources, the in-progress
// condition goes away and ResizeCompleted is emitted.
func TestResizeLive(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	s := newScenario(t, pod, func(s *scenario) {})
	s.w.SetAllocation(AllocationOf(pod))
	s.wantCalls("start a#0")

	want := resources("300m", "400m", "64Mi", "256Mi")
	s.admit(resized(pod, 0, want))
	if got := s.calls("resize", "start", "stop"); !slices.Equal(got, []string{"resize a cpu=400m mem=256Mi"}) {
		t.Fatalf("runtime calls %q", got)
	}
	st := s.container("a")
	if st.RestartCount != 0 || st.State.Running == nil {
		t.Errorf("container restarted: %+v", st)
	}
	if st.Resources == nil || !sameResources(*st.Resources, want) {
		t.Errorf("status resources %v, want %v", st.Resources, want)
	}
	if got := st.AllocatedResources[v1.ResourceCPU]; got.String() != "300m" {
		t.Errorf("allocatedResources %v", st.AllocatedResources)
	}
	if c := s.condition(v1.PodResizeInProgress); c != nil {
		t.Errorf("resize still in progress: %+v", c)
	}
	s.wantEvent("Normal ResizeCompleted: Pod resize completed: {\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{\"cpu\":\"400m\",\"memory\":\"256Mi\"},\"requests\":{\"cpu\":\"300m\",\"memory\":\"64Mi\"}}}],\"generation\":2}")
}

// A resize the node has not admitted changes nothing: the pod keeps running
// with its allocation.
func TestResizeNotAdmitted(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	s := newScenario(t, pod)
	s.w.SetAllocation(AllocationOf(pod))
	s.settle()
	s.w.Update(resized(pod, 0, resources("1", "2", "64Mi", "128Mi")))
	s.w.setResizePending(v1.PodReasonDeferred, "Node didn't have enough resource: cpu", 2)
	s.settle()
	if got := s.calls("resize"); len(got) != 0 {
		t.Fatalf("resized before admission: %q", got)
	}
	if got := s.container("a").AllocatedResources[v1.ResourceCPU]; got.String() != "100m" {
		t.Errorf("allocatedResources cpu %s, want 100m", got.String())
	}
	c := s.condition(v1.PodResizePending)
	if c == nil || c.Reason != v1.PodReasonDeferred || c.ObservedGeneration != 2 {
		t.Fatalf("PodResizePending %+v", c)
	}
	s.w.setResizePending("", "", 2)
	s.settle()
	if c := s.condition(v1.PodResizePending); c != nil {
		t.Fatalf("PodResizePending not cleared: %+v", c)
	}
}

// A resource whose resize policy is RestartContainer restarts the
// container at once (no back-off), which counts as a restart.
func TestResizeRestartContainer(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	s := newScenario(t, pod)
	s.w.SetAllocation(AllocationOf(pod))
	s.settle()
	s.wantCalls("start a#0")
	s.admit(resized(pod, 0, resources("100m", "200m", "64Mi", "256Mi")))
	if got := s.calls("resize", "start", "stop"); !slices.Equal(got, []string{"stop a 30s", "start a#1"}) {
		t.Fatalf("runtime calls %q", got)
	}
	if st := s.container("a"); st.RestartCount != 1 || st.State.Running == nil {
		t.Fatalf("status %+v, want running after one restart", st)
	}
	s.wantEvent("Normal Killing: Container a resize requires restart")
	if c := s.condition(v1.PodResizeInProgress); c != nil {
		t.Errorf("resize still in progress: %+v", c)
	}
	// A CPU change does not restart it.
	s.admit(resized(s.w.Object(), 0, resources("200m", "300m", "64Mi", "256Mi")))
	if got := s.calls("resize", "start", "stop"); !slices.Equal(got, []string{"resize a cpu=300m mem=256Mi"}) {
		t.Fatalf("runtime calls %q", got)
	}
}

// Memory decreases are applied before increases, so the containers' sum
// never peaks above both the old and the new one.
func TestResizeDecreasesFirst(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"), resources("100m", "200m", "64Mi", "256Mi"))
	s := newScenario(t, pod)
	s.w.SetAllocation(AllocationOf(pod))
	s.settle()
	next := resized(pod, 0, resources("100m", "200m", "64Mi", "256Mi"))
	next.Spec.Containers[1].Resources = resources("100m", "200m", "64Mi", "128Mi")
	s.admit(next)
	want := []string{"resize b cpu=200m mem=128Mi", "resize a cpu=200m mem=256Mi"}
	if got := s.calls("resize"); !slices.Equal(got, want) {
		t.Fatalf("resize calls %q, want %q", got, want)
	}
}

// A resize the runtime refuses leaves PodResizeInProgress with the Error
// reason and a ResizeError event; it is retried and completes later.
func TestResizeError(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	s := newScenario(t, pod)
	s.w.SetAllocation(AllocationOf(pod))
	s.settle()
	s.rt.mu.Lock()
	s.rt.failResize = errors.New("cannot decrease memory limits")
	s.rt.mu.Unlock()
	s.admit(resized(pod, 0, resources("100m", "200m", "64Mi", "64Mi")))
	c := s.condition(v1.PodResizeInProgress)
	if c == nil || c.Reason != v1.PodReasonError || !strings.Contains(c.Message, "cannot decrease") || c.ObservedGeneration != 2 {
		t.Fatalf("PodResizeInProgress %+v, want Error", c)
	}
	s.wantEvent("Warning ResizeError: Pod resize error:")
	if st := s.container("a"); st.Resources.Limits.Memory().String() != "128Mi" {
		t.Errorf("status resources %v: the old limit still applies", st.Resources)
	}
	s.rt.mu.Lock()
	s.rt.failResize = nil
	s.rt.mu.Unlock()
	s.step(resizeRetry)
	if got := s.calls("resize"); !slices.Equal(got, []string{"resize a cpu=200m mem=64Mi"}) {
		t.Fatalf("resize calls %q", got)
	}
	if c := s.condition(v1.PodResizeInProgress); c != nil {
		t.Fatalf("resize still in progress: %+v", c)
	}
}

// After a restart of hostlet the worker reads what an adopted container
// runs with: an admitted resize not yet applied is applied then.
func TestResizeAfterAdoption(t *testing.T) {
	old := resources("100m", "200m", "64Mi", "128Mi")
	pod := resizablePod(resources("100m", "400m", "64Mi", "128Mi"))
	s := newScenario(t, pod, func(s *scenario) {
		s.rt.sandbox = true
		s.rt.containers["id9"] = ContainerInfo{ID: "id9", Name: "a", Running: true, StartedAt: epoch.Add(-time.Hour)}
		s.rt.resources = map[string]v1.ResourceRequirements{"id9": old}
	})
	s.w.SetAllocation(AllocationOf(pod))
	s.w.poke()
	s.settle()
	if got := s.calls("resize", "start", "stop"); !slices.Equal(got, []string{"resize a cpu=400m mem=128Mi"}) {
		t.Fatalf("runtime calls %q", got)
	}
}

func TestAllocationApply(t *testing.T) {
	pod := withInit(resizablePod(resources("100m", "200m", "64Mi", "128Mi")), sidecar("s"))
	a := AllocationOf(pod)
	if _, changed := a.Apply(pod); changed {
		t.Fatal("the pod's own allocation changed it")
	}
	next := resized(pod, 0, resources("1", "2", "1Gi", "1Gi"))
	got, changed := a.Apply(next)
	if !changed || got.Spec.Containers[0].Resources.Limits.Cpu().String() != "200m" || next.Spec.Containers[0].Resources.Limits.Cpu().String() != "2" {
		t.Fatalf("Apply: changed %v, cpu %v (the desired pod must stay untouched)", changed, got.Spec.Containers[0].Resources.Limits.Cpu())
	}
	if _, ok := a["s"]; !ok {
		t.Error("sidecar not in the allocation")
	}
}

// The pod's cgroup grows before its containers are resized and shrinks
// after, as the kubelet's doPodResizeAction orders them, live or with a
// restart.
func TestResizePodCgroupOrder(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	s := newScenario(t, pod)
	s.w.SetAllocation(AllocationOf(pod))
	s.settle()
	if got := s.calls("pod-cgroup", "start"); !slices.Equal(got, []string{"start a#0"}) {
		t.Fatalf("runtime calls %q without a resize", got)
	}
	next := resized(pod, 0, resources("300m", "400m", "64Mi", "256Mi"))
	s.admit(next)
	want := []string{"pod-cgroup grow", "resize a cpu=400m mem=256Mi", "pod-cgroup shrink"}
	if got := s.calls("pod-cgroup", "resize"); !slices.Equal(got, want) {
		t.Fatalf("runtime calls %q, want %q", got, want)
	}

	restarting := resized(next, 0, resources("300m", "400m", "64Mi", "128Mi"))
	restarting.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	s.admit(restarting)
	want = []string{"pod-cgroup grow", "stop a 30s", "pod-cgroup shrink", "start a#1"}
	if got := s.calls("pod-cgroup", "resize", "stop", "start"); !slices.Equal(got, want) {
		t.Fatalf("runtime calls %q, want %q", got, want)
	}
}

// A pod cgroup that cannot grow leaves the containers as they are; one
// that cannot shrink (its memory use above the new limit) keeps the resize
// in progress, and is shrunk at a retry though the containers are done.
func TestResizePodCgroupError(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	s := newScenario(t, pod)
	s.w.SetAllocation(AllocationOf(pod))
	s.settle()
	fail := func(step string, err error) {
		s.rt.mu.Lock()
		s.rt.failPodCgroup = map[string]error{step: err}
		s.rt.mu.Unlock()
	}
	fail("grow", errors.New("no cgroup"))
	s.admit(resized(pod, 0, resources("100m", "400m", "64Mi", "128Mi")))
	if got := s.calls("resize", "pod-cgroup"); len(got) != 0 {
		t.Fatalf("runtime calls %q, want none", got)
	}
	if c := s.condition(v1.PodResizeInProgress); c == nil || c.Reason != v1.PodReasonError {
		t.Fatalf("PodResizeInProgress %+v, want Error", c)
	}

	fail("shrink", errors.New("cannot decrease memory limits"))
	s.step(resizeRetry)
	if got := s.calls("resize", "pod-cgroup"); !slices.Equal(got, []string{"pod-cgroup grow", "resize a cpu=400m mem=128Mi"}) {
		t.Fatalf("runtime calls %q", got)
	}
	if c := s.condition(v1.PodResizeInProgress); c == nil || !strings.Contains(c.Message, "cannot decrease") {
		t.Fatalf("PodResizeInProgress %+v, want the shrink's error", c)
	}

	fail("", nil)
	s.step(resizeRetry)
	if got := s.calls("resize", "pod-cgroup"); !slices.Equal(got, []string{"pod-cgroup shrink"}) {
		t.Fatalf("runtime calls %q", got)
	}
	if c := s.condition(v1.PodResizeInProgress); c != nil {
		t.Fatalf("resize still in progress: %+v", c)
	}
}

// fakeAllocator answers resizes as told and keeps what it admitted.
type fakeAllocator struct {
	reason, msg string
	asked       int
	saved       Allocation
}

func (a *fakeAllocator) AdmitResize(*v1.Pod) (string, string, bool) {
	a.asked++
	return a.reason, a.msg, a.reason == ""
}

func (a *fakeAllocator) SaveAllocation(_ types.UID, alloc Allocation) error {
	a.saved = alloc
	return nil
}

type eventList []string

func (e *eventList) Event(_ *v1.Pod, _, _, reason, _ string) { *e = append(*e, reason) }

// The worker decides its pod's resize with the node's answer: Deferred
// (one event, asked again), then admitted (recorded, in progress, one
// ResizeStarted); Infeasible is not asked again; a resize reverted before
// its admission is no longer pending.
func TestDecideResize(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	node, events := &fakeAllocator{reason: v1.PodReasonDeferred, msg: "Node didn't have enough resource: cpu"}, &eventList{}
	w := NewPod(pod, Config{Allocator: node, Recorder: events})
	if w.Admitted(AllocationOf(pod)) || node.saved == nil {
		t.Fatalf("a pod admitted as its spec asks has a pending resize, or its allocation is not recorded")
	}
	want := resized(pod, 0, resources("1", "1", "64Mi", "128Mi"))
	w.Update(want)
	if !w.ResizeRequested(want) {
		t.Fatal("a change of resources is not a resize to decide")
	}
	if !w.DecideResize() || !w.DecideResize() || w.ResizePending() != v1.PodReasonDeferred {
		t.Fatalf("deferred resize not asked again, pending %q", w.ResizePending())
	}
	if !slices.Equal(*events, []string{EventResizeDeferred}) {
		t.Fatalf("events %q", *events)
	}
	node.reason = ""
	if w.DecideResize() || w.ResizePending() != "" || !sameResources(node.saved["a"], want.Spec.Containers[0].Resources) {
		t.Fatalf("admitted resize: pending %q, recorded %v", w.ResizePending(), node.saved)
	}
	if !slices.Equal(*events, []string{EventResizeDeferred, EventResizeStarted}) {
		t.Fatalf("events %q", *events)
	}
	if w.ResizeRequested(want) {
		t.Fatal("the same resources again are a new resize")
	}

	node.reason = v1.PodReasonInfeasible
	huge := resized(want, 0, resources("100", "100", "64Mi", "128Mi"))
	w.Update(huge)
	if !w.ResizeRequested(huge) || w.DecideResize() || w.ResizePending() != v1.PodReasonInfeasible {
		t.Fatalf("infeasible resize asked again, or pending %q", w.ResizePending())
	}
	w.Update(want)
	if w.ResizeRequested(want) || w.ResizePending() != "" {
		t.Fatalf("reverted resize still pending %q", w.ResizePending())
	}
}

// Pending resizes are decided in the kubelet's order: those not asking for
// more first, then the higher priority, then Guaranteed pods.
func TestOrderResizes(t *testing.T) {
	worker := func(name string, cpu string, priority int32, qos v1.PodQOSClass) *Pod {
		pod := resizablePod(resources("500m", "1", "64Mi", "128Mi"))
		pod.Name, pod.Spec.Priority, pod.Status.QOSClass = name, &priority, qos
		w := NewPod(pod, Config{})
		w.SetAllocation(AllocationOf(pod))
		w.Update(resized(pod, 0, resources(cpu, "1", "64Mi", "128Mi")))
		return w
	}
	pods := []*Pod{
		worker("grow-low", "2", 0, v1.PodQOSBurstable),
		worker("grow-high", "2", 10, v1.PodQOSBurstable),
		worker("grow-high-guaranteed", "2", 10, v1.PodQOSGuaranteed),
		worker("shrink", "100m", 0, v1.PodQOSBurstable),
	}
	OrderResizes(pods)
	var got []string
	for _, w := range pods {
		got = append(got, w.Object().Name)
	}
	if want := []string{"shrink", "grow-high-guaranteed", "grow-high", "grow-low"}; !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
}

package provider

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hostlet/hostlet/lifecycle"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// resizeNode answers resizes as told and admits every pod.
type resizeNode struct {
	reason, msg string
	asked       int
}

func (n *resizeNode) Admit(*v1.Pod, []*v1.Pod) (string, string, bool) { return "", "", true }
func (n *resizeNode) PodsToPreempt(*v1.Pod, []*v1.Pod) ([]*v1.Pod, error) {
	return nil, errors.New("nothing to preempt")
}

func (n *resizeNode) MissingFeaturesForUpdate(*v1.Pod, *v1.Pod) string { return "" }
func (n *resizeNode) AdmitResize(*v1.Pod, []*v1.Pod) (string, string, bool) {
	n.asked++
	return n.reason, n.msg, n.reason == ""
}

// allocHost keeps allocations in memory.
type allocHost struct {
	Host
	mu    sync.Mutex
	saved map[types.UID]lifecycle.Allocation
}

func (h *allocHost) SaveAllocation(uid types.UID, a lifecycle.Allocation) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.saved[uid] = a
	return nil
}

func (h *allocHost) LoadAllocation(uid types.UID) (lifecycle.Allocation, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.saved[uid]
	return a, ok
}

type reasons struct {
	mu  sync.Mutex
	got []string
}

func (r *reasons) Event(_ *v1.Pod, _, _, reason, msg string) {
	r.mu.Lock()
	r.got = append(r.got, reason+": "+msg)
	r.mu.Unlock()
}

func (r *reasons) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	for i, e := range out {
		out[i], _, _ = strings.Cut(e, ":")
	}
	return out
}

func cpuOf(a lifecycle.Allocation) string {
	q := a["c"].Requests[v1.ResourceCPU]
	return q.String()
}

func withCPU(pod *v1.Pod, cpu string) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}
	return pod
}

// A resize that does not fit waits Deferred (one event), is decided again
// when retried, and once admitted is recorded, with ResizeStarted; until
// then the node counts the pod with what it was given. An Infeasible one
// is not retried.
func TestResizeAdmission(t *testing.T) {
	p, api := testRegistry(t)
	node, host, ev := &resizeNode{reason: v1.PodReasonDeferred, msg: "Node didn't have enough resource: cpu"}, &allocHost{saved: map[types.UID]lifecycle.Allocation{}}, &reasons{}
	p.node, p.host, p.events, p.podsSynced = node, host, ev, func() bool { return true }
	pod := withCPU(registryPod("web-0", "u1"), "1")
	pod.Generation = 1
	_ = api.Add(pod)
	p.register(pod)
	e := p.pods[pod.UID]
	e.worker = lifecycle.NewPod(pod, lifecycle.Config{Recorder: ev, Allocator: allocator{p, pod.UID}})
	e.worker.SetAllocation(lifecycle.AllocationOf(pod))
	// As SyncPod hands an update on.
	update := func(pod *v1.Pod) {
		e.worker.Update(pod)
		if e.worker.ResizeRequested(pod) {
			p.resizeRequested(pod.UID)
		}
	}

	want := withCPU(pod, "2")
	want.Generation = 2
	update(want)
	if got := e.worker.ResizePending(); got != v1.PodReasonDeferred {
		t.Fatalf("pending %q, want Deferred", got)
	}
	if got := ev.take(); !slices.Equal(got, []string{lifecycle.EventResizeDeferred}) {
		t.Fatalf("events %q", got)
	}
	if got := p.admittedPods()[0].Spec.Containers[0].Resources.Requests.Cpu().String(); got != "1" {
		t.Fatalf("admission counts the pod with cpu %s, want its allocated 1", got)
	}
	// Retried while it still does not fit: no new event.
	p.retryResizes()
	if node.asked != 2 || len(ev.take()) != 0 || !slices.Equal(p.resizes, []types.UID{"u1"}) {
		t.Fatalf("retry: asked %d, queue %v", node.asked, p.resizes)
	}
	// Room freed: admitted.
	node.reason = ""
	p.retryResizes()
	if got := ev.take(); !slices.Equal(got, []string{lifecycle.EventResizeStarted}) {
		t.Fatalf("events %q", got)
	}
	if got := cpuOf(e.worker.Allocation()); got != "2" || e.worker.ResizePending() != "" || len(p.resizes) != 0 {
		t.Fatalf("after admission: allocated cpu %s, pending %q, queue %v", got, e.worker.ResizePending(), p.resizes)
	}
	if a, _ := host.LoadAllocation("u1"); cpuOf(a) != "2" {
		t.Fatalf("allocation not recorded: %v", a)
	}

	// Infeasible: not queued for retries.
	node.reason, node.msg = v1.PodReasonInfeasible, "Node didn't have enough capacity: cpu"
	huge := withCPU(want, "100")
	huge.Generation = 3
	update(huge)
	if got := ev.take(); !slices.Equal(got, []string{lifecycle.EventResizeInfeasible}) || len(p.resizes) != 0 {
		t.Fatalf("events %q, queue %v", got, p.resizes)
	}
	// Reverted: no longer pending.
	update(want)
	if got := e.worker.ResizePending(); got != "" {
		t.Fatalf("pending %q after the revert", got)
	}
}

// Resizes wait until every pod of the node is known again after a restart
// of hostlet: one decided earlier could take room a pod not re-admitted yet
// holds.
func TestResizesWaitForAllPods(t *testing.T) {
	p, api := testRegistry(t)
	p.podsSynced = func() bool { return true }
	a, b := registryPod("a", "a"), registryPod("b", "b")
	_ = api.Add(a)
	_ = api.Add(b)
	p.register(a)
	if p.allPodsKnown() {
		t.Fatal("ready while pod b is not admitted again")
	}
	p.register(b)
	if !p.allPodsKnown() {
		t.Fatal("not ready with every pod admitted")
	}
}

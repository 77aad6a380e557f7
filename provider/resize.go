package provider

import (
	"context"
	"slices"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// An in-place resize is decided by the pod's worker
// (lifecycle.Pod.DecideResize), which keeps its conditions and events; the
// provider only says when: it queues the pods whose resize waits, asks
// them in the kubelet's order under mu (as admissions are: two resizes
// never count the same room), and answers their questions to the node
// (allocator).

// resizeRetryPeriod is how often pending resizes are tried again when
// nothing else (a pod leaving, another resize) gave them a chance, as the
// kubelet's allocation manager retries them.
const resizeRetryPeriod = 3 * time.Minute

// allocation is what the pod was admitted with: its record from before a
// restart of hostlet, else its spec as it is now.
func (p *Provider) allocation(pod *v1.Pod) lifecycle.Allocation {
	if a, ok := p.host.LoadAllocation(pod.UID); ok {
		return a
	}
	return lifecycle.AllocationOf(pod)
}

// allocator is the node's side of one pod's resize (lifecycle.Allocator).
type allocator struct {
	p   *Provider
	uid types.UID
}

// AdmitResize asks the node, beside the other pods it runs at their
// allocated resources. Called with mu (DecideResize runs in retryResizes).
func (a allocator) AdmitResize(pod *v1.Pod) (string, string, bool) {
	var others []*v1.Pod
	for _, o := range a.p.admittedPods() {
		if o.UID != a.uid {
			others = append(others, o)
		}
	}
	return a.p.node.AdmitResize(pod, others)
}

func (a allocator) SaveAllocation(uid types.UID, alloc lifecycle.Allocation) error {
	return a.p.host.SaveAllocation(uid, alloc)
}

// resizeRequested queues the resize of a pod and tries the pending ones.
func (p *Provider) resizeRequested(uid types.UID) {
	p.mu.Lock()
	p.pushResize(uid)
	p.mu.Unlock()
	p.retryResizes()
}

// pushResize queues a pod's resize. Called with mu.
func (p *Provider) pushResize(uid types.UID) {
	if !slices.Contains(p.resizes, uid) {
		p.resizes = append(p.resizes, uid)
	}
}

// retryResizes has every pending resize decided, in the kubelet's order;
// the deferred ones stay queued.
func (p *Provider) retryResizes() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.resizes) == 0 || !p.allPodsKnown() {
		return
	}
	var queue []*lifecycle.Pod
	for _, uid := range p.resizes {
		if e := p.pods[uid]; e != nil {
			queue = append(queue, e.worker)
		}
	}
	lifecycle.OrderResizes(queue)
	p.resizes = nil
	for _, w := range queue {
		if w.DecideResize() {
			p.resizes = append(p.resizes, w.Object().UID)
		}
	}
}

// allPodsKnown reports that every pod of the node the API has (not
// finished or being deleted) has been admitted again since hostlet
// started, as the kubelet waits for its sources before it decides a
// resize: one admitted earlier would take room that a pod still to be
// re-admitted holds. Called with mu.
func (p *Provider) allPodsKnown() bool {
	if p.resizesReady {
		return true
	}
	if p.lister == nil || p.podsSynced == nil || !p.podsSynced() {
		return false
	}
	pods, err := p.lister.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, pod := range pods {
		if lifecycle.Terminal(pod.Status.Phase) || pod.DeletionTimestamp != nil {
			continue
		}
		if _, ok := p.pods[pod.UID]; !ok {
			if _, gone := p.gone[pod.UID]; !gone {
				return false
			}
		}
	}
	p.resizesReady = true
	return true
}

// retryResizesPeriodically gives deferred resizes their periodic chance
// until ctx ends; until all pods are known again, every second.
func (p *Provider) retryResizesPeriodically(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	ready := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.retryResizes()
			p.mu.Lock()
			now := p.allPodsKnown()
			p.mu.Unlock()
			if now && !ready {
				ready = true
				t.Reset(resizeRetryPeriod)
			}
		}
	}
}

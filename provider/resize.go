package provider

import (
	"context"
	"slices"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
)

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

// allocated records an admitted pod's allocation with its worker and on
// disk; a spec asking for more than it (a resize while hostlet was down)
// is a pending resize. Called with mu.
func (p *Provider) allocated(w *lifecycle.Pod, pod *v1.Pod, a lifecycle.Allocation) {
	w.SetAllocation(a)
	if err := p.host.SaveAllocation(pod.UID, a); err != nil {
		lifecycle.PodLogger(pod).WithError(err).Warn("recording the pod's allocated resources")
	}
	if _, pending := a.Apply(pod); pending && pod.DeletionTimestamp == nil {
		p.pushResize(pod.UID)
	}
}

// resizeRequested handles a pod update: a change of its containers' resources
// is a resize, admitted now or queued; one reverted before it was admitted
// clears its pending condition.
func (p *Provider) resizeRequested(e *podEntry, pod *v1.Pod) {
	res := containerResources(pod)
	p.mu.Lock()
	seen := e.resources
	e.resources = res
	p.mu.Unlock()
	if pod.DeletionTimestamp != nil || equality.Semantic.DeepEqual(seen, res) {
		return
	}
	if _, pending := e.worker.Allocation().Apply(pod); !pending {
		e.worker.SetResizePending("", "", pod.Generation)
		return
	}
	p.mu.Lock()
	p.pushResize(pod.UID)
	p.mu.Unlock()
	p.retryResizes()
}

func containerResources(pod *v1.Pod) []v1.ResourceRequirements {
	var out []v1.ResourceRequirements
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		out = append(out, c.Resources)
	}
	return out
}

// pushResize queues a pod's resize. Called with mu.
func (p *Provider) pushResize(uid types.UID) {
	if !slices.Contains(p.resizes, uid) {
		p.resizes = append(p.resizes, uid)
	}
}

// retryResizes tries every pending resize, in the kubelet's order: those
// not asking for more first, then by priority, then Guaranteed pods.
// Under mu, as admissions are: two resizes never count the same room.
func (p *Provider) retryResizes() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.resizes) == 0 || !p.allPodsKnown() {
		return
	}
	var queue []*podEntry
	for _, uid := range p.resizes {
		if e := p.pods[uid]; e != nil {
			queue = append(queue, e)
		}
	}
	slices.SortStableFunc(queue, func(a, b *podEntry) int { return resizeRank(a) - resizeRank(b) })
	p.resizes = nil
	for _, e := range queue {
		if p.handleResize(e) {
			p.resizes = append(p.resizes, e.worker.Object().UID)
		}
	}
}

// resizeRank orders pending resizes (lower first).
func resizeRank(e *podEntry) int {
	pod := e.worker.Object()
	rank := 0
	if increasesRequests(e.worker.Allocation(), pod) {
		rank = 1 << 40
	}
	if pod.Spec.Priority != nil {
		rank -= int(*pod.Spec.Priority) * 2
	}
	if pod.Status.QOSClass != v1.PodQOSGuaranteed {
		rank++
	}
	return rank
}

func increasesRequests(a lifecycle.Allocation, pod *v1.Pod) bool {
	allocated, _ := a.Apply(pod)
	opts := resourcehelper.PodResourcesOptions{}
	was, want := resourcehelper.PodRequests(allocated, opts), resourcehelper.PodRequests(pod, opts)
	return want.Memory().Cmp(*was.Memory()) > 0 || want.Cpu().Cmp(*was.Cpu()) > 0
}

// handleResize is the kubelet's handlePodResourcesResize: the resize is
// admitted (allocated, recorded, in progress) or left pending, Infeasible
// or Deferred, with the kubelet's events. It reports whether the resize
// stays queued (Deferred). Called with mu.
func (p *Provider) handleResize(e *podEntry) bool {
	pod := e.worker.Object()
	if pod.DeletionTimestamp != nil {
		return false
	}
	l := lifecycle.PodLogger(pod)
	if _, pending := e.worker.Allocation().Apply(pod); !pending {
		e.worker.SetResizePending("", "", pod.Generation)
		return false
	}
	var others []*v1.Pod
	for _, o := range p.admittedPods() {
		if o.UID != pod.UID {
			others = append(others, o)
		}
	}
	reason, msg, ok := p.node.AdmitResize(pod, others)
	if !ok {
		if e.worker.SetResizePending(reason, msg, pod.Generation) {
			l.WithFields(log.Fields{"reason": reason, "message": msg}).Info("pod resize pending")
			ev := lifecycle.EventResizeDeferred
			if reason == v1.PodReasonInfeasible {
				ev = lifecycle.EventResizeInfeasible
			}
			p.events.Event(pod, "", v1.EventTypeWarning, ev, lifecycle.ResizeMessage("Pod resize "+reason, pod, pod.Generation, msg))
		}
		return reason == v1.PodReasonDeferred
	}
	a := lifecycle.AllocationOf(pod)
	if err := p.host.SaveAllocation(pod.UID, a); err != nil {
		// Not admitted until it is on record: retried as a deferred one.
		l.WithError(err).Warn("recording the pod's allocated resources")
		return true
	}
	e.worker.Allocate(a, pod.Generation)
	l.Info("pod resize admitted")
	p.events.Event(pod, "", v1.EventTypeNormal, lifecycle.EventResizeStarted, lifecycle.ResizeMessage("Pod resize started", pod, pod.Generation, ""))
	return false
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

package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Events of an in-place resize, as the kubelet names them.
const (
	EventResizeStarted    = "ResizeStarted"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeError      = "ResizeError"
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
)

// resizeRetry is how soon a resize the runtime refused is tried again (the
// kubelet retries at its next sync of the pod).
const resizeRetry = 10 * time.Second

// Allocation is the requests and limits the node admitted for each of a
// pod's resizable containers (containers and sidecars), the kubelet's
// allocation checkpoint: the pod runs with these, whatever its spec asks
// for, until the node admits a resize.
type Allocation map[string]v1.ResourceRequirements

// AllocationOf is the allocation of the pod's spec as it is.
func AllocationOf(pod *v1.Pod) Allocation {
	a := Allocation{}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		a[c.Name] = *c.Resources.DeepCopy()
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; IsSidecar(c) {
			a[c.Name] = *c.Resources.DeepCopy()
		}
	}
	return a
}

// Apply returns the pod with the allocated resources in its spec (a copy
// when anything differs) and whether anything did: a resize not admitted.
func (a Allocation) Apply(pod *v1.Pod) (*v1.Pod, bool) {
	if a == nil || pod == nil {
		return pod, false
	}
	out, changed := pod, false
	set := func(list func(*v1.Pod) []v1.Container) {
		for i, c := range list(out) {
			r, ok := a[c.Name]
			if !ok || equality.Semantic.DeepEqual(c.Resources, r) {
				continue
			}
			if !changed {
				out, changed = pod.DeepCopy(), true
			}
			list(out)[i].Resources = *r.DeepCopy()
		}
	}
	set(func(p *v1.Pod) []v1.Container { return p.Spec.Containers })
	set(func(p *v1.Pod) []v1.Container { return p.Spec.InitContainers })
	return out, changed
}

// ResizeMessage is the message of the kubelet's resize events: what the
// pod's containers ask for (or were given), at generation, with the error.
func ResizeMessage(prefix string, pod *v1.Pod, generation int64, errMsg string) string {
	type alloc struct {
		Name      string                  `json:"name"`
		Resources v1.ResourceRequirements `json:"resources,omitempty"`
	}
	var sum struct {
		InitContainers []alloc `json:"initContainers,omitempty"`
		Containers     []alloc `json:"containers,omitempty"`
		Generation     int64   `json:"generation"`
		Error          string  `json:"error,omitempty"`
	}
	sum.Generation, sum.Error = generation, errMsg
	for _, c := range pod.Spec.InitContainers {
		sum.InitContainers = append(sum.InitContainers, alloc{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		sum.Containers = append(sum.Containers, alloc{c.Name, c.Resources})
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return prefix
	}
	return prefix + ": " + string(b)
}

// SetAllocation gives a new worker the allocation its pod was admitted
// with.
func (p *Pod) SetAllocation(a Allocation) {
	p.shared.mu.Lock()
	p.shared.alloc = a
	p.shared.mu.Unlock()
}

// Admitted gives a new worker the allocation its pod was admitted with and
// records it with the node; it reports whether the spec asks for more than
// it (a resize while hostlet was down), a resize for the node to decide.
func (p *Pod) Admitted(a Allocation) (pending bool) {
	p.SetAllocation(a)
	pod := p.Object()
	if p.cfg.Allocator != nil {
		if err := p.cfg.Allocator.SaveAllocation(pod.UID, a); err != nil {
			PodLogger(pod).WithError(err).Warn("recording the pod's allocated resources")
		}
	}
	_, pending = a.Apply(pod)
	return pending && pod.DeletionTimestamp == nil
}

// Allocation is what the node admitted for the pod's containers.
func (p *Pod) Allocation() Allocation {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	return p.shared.alloc
}

// Allocated is the pod as it runs, for the node's accounting: its latest
// status (the object before the first), with the allocated resources.
func (p *Pod) Allocated() *v1.Pod {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	pod := p.shared.status
	if pod == nil {
		pod = p.shared.latest
	}
	out, _ := p.shared.alloc.Apply(pod)
	return out
}

// ResizeRequested handles a pod update (after Update): a change of its
// containers' resources is a resize, which it reports for the node to
// decide (DecideResize); one reverted before it was admitted clears its
// pending condition.
func (p *Pod) ResizeRequested(pod *v1.Pod) bool {
	res := containerResources(pod)
	p.shared.mu.Lock()
	seen := p.shared.resources
	p.shared.resources = res
	p.shared.mu.Unlock()
	if pod.DeletionTimestamp != nil || equality.Semantic.DeepEqual(seen, res) {
		return false
	}
	if _, pending := p.Allocation().Apply(pod); !pending {
		p.setResizePending("", "", pod.Generation)
		return false
	}
	return true
}

// containerResources are the resources of every container of the pod
// (init ones first), whose change is a resize.
func containerResources(pod *v1.Pod) []v1.ResourceRequirements {
	var out []v1.ResourceRequirements
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		out = append(out, c.Resources)
	}
	return out
}

// DecideResize is the kubelet's handlePodResourcesResize: the resize of the
// newest object is admitted (allocated, recorded, in progress) or left
// pending, Infeasible or Deferred, with the kubelet's events. It reports
// whether the node should ask again (Deferred). The node serializes the
// decisions with its admissions: two never count the same room.
func (p *Pod) DecideResize() (deferred bool) {
	pod := p.Object()
	if pod.DeletionTimestamp != nil || p.cfg.Allocator == nil {
		return false
	}
	l := PodLogger(pod)
	if _, pending := p.Allocation().Apply(pod); !pending {
		p.setResizePending("", "", pod.Generation)
		return false
	}
	reason, msg, ok := p.cfg.Allocator.AdmitResize(pod)
	if !ok {
		if p.setResizePending(reason, msg, pod.Generation) {
			l.WithFields(log.Fields{"reason": reason, "message": msg}).Info("pod resize pending")
			ev := EventResizeDeferred
			if reason == v1.PodReasonInfeasible {
				ev = EventResizeInfeasible
			}
			p.recordEvent(pod, "", v1.EventTypeWarning, ev, ResizeMessage("Pod resize "+reason, pod, pod.Generation, msg))
		}
		return reason == v1.PodReasonDeferred
	}
	a := AllocationOf(pod)
	if err := p.cfg.Allocator.SaveAllocation(pod.UID, a); err != nil {
		// Not admitted until it is on record: retried as a deferred one.
		l.WithError(err).Warn("recording the pod's allocated resources")
		return true
	}
	p.allocate(a, pod.Generation)
	l.Info("pod resize admitted")
	p.recordEvent(pod, "", v1.EventTypeNormal, EventResizeStarted, ResizeMessage("Pod resize started", pod, pod.Generation, ""))
	return false
}

// OrderResizes sorts pending resizes in the kubelet's order: those not
// asking for more first, then by priority, then Guaranteed pods.
func OrderResizes(pods []*Pod) {
	slices.SortStableFunc(pods, func(a, b *Pod) int { return a.resizeRank() - b.resizeRank() })
}

// resizeRank orders pending resizes (lower first).
func (p *Pod) resizeRank() int {
	pod := p.Object()
	rank := 0
	if increasesRequests(p.Allocation(), pod) {
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

func increasesRequests(a Allocation, pod *v1.Pod) bool {
	allocated, _ := a.Apply(pod)
	opts := resourcehelper.PodResourcesOptions{}
	was, want := resourcehelper.PodRequests(allocated, opts), resourcehelper.PodRequests(pod, opts)
	return want.Memory().Cmp(*was.Memory()) > 0 || want.Cpu().Cmp(*was.Cpu()) > 0
}

// allocate records a resize the node admitted at generation: it is no
// longer pending, and in progress until every running container runs
// with it (the kubelet's allocation manager starts it over at each one).
func (p *Pod) allocate(a Allocation, generation int64) {
	p.shared.mu.Lock()
	p.shared.alloc = a
	p.shared.resizePending = nil
	p.shared.resizeInProgress = p.resizeCondition(v1.PodResizeInProgress, nil, "", "", generation)
	p.shared.mu.Unlock()
	p.poke()
}

// setResizePending sets the PodResizePending condition (reason Infeasible
// or Deferred), or clears it with an empty reason. It reports whether the
// reason or generation changed, when the kubelet emits its event.
func (p *Pod) setResizePending(reason, message string, generation int64) bool {
	p.shared.mu.Lock()
	prev := p.shared.resizePending
	if reason == "" {
		p.shared.resizePending = nil
	} else {
		p.shared.resizePending = p.resizeCondition(v1.PodResizePending, prev, reason, message, generation)
	}
	changed := (prev == nil) != (p.shared.resizePending == nil) ||
		(prev != nil && (prev.Reason != reason || prev.ObservedGeneration != generation))
	p.shared.mu.Unlock()
	p.poke()
	return changed
}

// ResizePending is the reason of the pending resize ("" when none).
func (p *Pod) ResizePending() string {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	if p.shared.resizePending == nil {
		return ""
	}
	return p.shared.resizePending.Reason
}

// resizeCondition is a resize condition as the kubelet's status manager
// makes one: true, its transition time kept while the reason stays.
// Called with mu.
func (p *Pod) resizeCondition(t v1.PodConditionType, old *v1.PodCondition, reason, message string, generation int64) *v1.PodCondition {
	now := metav1.NewTime(p.clock.Now().Truncate(time.Second))
	c := &v1.PodCondition{Type: t, Status: v1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: generation, LastProbeTime: now, LastTransitionTime: now}
	if old != nil && old.Reason == reason {
		c.LastTransitionTime = old.LastTransitionTime
		if old.Message == message && old.ObservedGeneration == generation {
			// Unchanged: no new status for a retry that found the same.
			c.LastProbeTime = old.LastProbeTime
		}
	}
	return c
}

// resizable lists the containers a resize applies to: the sidecars and
// the main ones.
func (p *Pod) resizable() []*v1.Container {
	spec := &p.pod.Spec
	var out []*v1.Container
	for i := range spec.InitContainers {
		if IsSidecar(&spec.InitContainers[i]) {
			out = append(out, &spec.InitContainers[i])
		}
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// actualResources is what a running container was configured with: known
// from its start or last resize, else (adopted) asked of the runtime.
func (p *Pod) actualResources(ctx context.Context, c *v1.Container, rec *container) *v1.ResourceRequirements {
	if rec.actualFor == rec.cur.ID && rec.actual != nil {
		return rec.actual
	}
	r, err := p.cfg.Runtime.ContainerResources(ctx, p.pod, c, rec.cur.ID)
	if err != nil {
		p.logger().WithError(err).WithField("container", c.Name).Warn("reading container resources")
		return nil
	}
	rec.actual, rec.actualFor = &r, rec.cur.ID
	return rec.actual
}

// resize brings running containers to their allocated resources, as the
// kubelet's computePodResizeAction and doPodResizeAction do: the pod's
// cgroup grows first, then a container whose resize policy for a changed
// resource is RestartContainer is restarted (killed here, started again by
// the sync at once), the others are updated live, memory decreases first,
// and the pod's cgroup shrinks last. It returns when to retry.
func (p *Pod) resize(ctx context.Context) time.Time {
	type update struct {
		c   *v1.Container
		rec *container
	}
	var restart, first, then []update
	for _, c := range p.resizable() {
		rec := p.containers[c.Name]
		if rec == nil || !rec.cur.Running {
			continue
		}
		actual := p.actualResources(ctx, c, rec)
		if actual == nil || sameResources(c.Resources, *actual) {
			continue
		}
		u := update{c, rec}
		switch lim := c.Resources.Limits.Memory(); {
		case resizeNeedsRestart(c, *actual):
			restart = append(restart, u)
		case !lim.IsZero() && lim.Cmp(*actual.Limits.Memory()) < 0:
			first = append(first, u)
		default:
			then = append(then, u)
		}
	}
	failed := func(what string, err error) time.Time {
		if ctx.Err() != nil {
			return time.Time{}
		}
		p.logger().WithError(err).Warn(what)
		p.resizeFailed(err.Error())
		return p.clock.Now().Add(resizeRetry)
	}
	if len(restart)+len(first)+len(then) > 0 {
		// The containers' new limits fit in the pod's before they apply.
		if err := p.cfg.Runtime.ResizePodCgroup(ctx, p.pod, true); err != nil {
			return failed("resizing the pod cgroup", err)
		}
		p.podCgroupShrink = true
	}
	for _, u := range restart {
		if u.rec.probeCancel != nil {
			u.rec.probeCancel()
			u.rec.probeCancel = nil
		}
		p.kill(ctx, u.c, u.rec, p.clock.Now().Add(p.specGrace()), fmt.Sprintf("Container %s resize requires restart", u.c.Name), nil)
		// Started again in this sync without a back-off, as a container
		// killed by its probe is.
		u.rec.probeKilled = true
	}
	for _, u := range append(first, then...) {
		if err := p.cfg.Runtime.ResizeContainer(ctx, p.pod, u.c, u.rec.cur.ID); err != nil {
			return failed("resizing container "+u.c.Name, err)
		}
		u.rec.actual, u.rec.actualFor = u.c.Resources.DeepCopy(), u.rec.cur.ID
		p.logger().WithField("container", u.c.Name).Info("container resized")
	}
	if p.podCgroupShrink {
		if err := p.cfg.Runtime.ResizePodCgroup(ctx, p.pod, false); err != nil {
			return failed("resizing the pod cgroup", err)
		}
		p.podCgroupShrink = false
	}
	return time.Time{}
}

// resizeFailed marks the resize in progress with the Error reason; the
// event is emitted when the condition changes, as the kubelet does.
func (p *Pod) resizeFailed(msg string) {
	p.shared.mu.Lock()
	prev := p.shared.resizeInProgress
	gen := p.pod.Generation
	if prev != nil {
		gen = prev.ObservedGeneration
	}
	p.shared.resizeInProgress = p.resizeCondition(v1.PodResizeInProgress, prev, v1.PodReasonError, msg, gen)
	changed := prev == nil || prev.Reason != v1.PodReasonError || prev.Message != msg
	p.shared.mu.Unlock()
	if changed {
		p.event("", v1.EventTypeWarning, EventResizeError, ResizeMessage("Pod resize error", p.pod, gen, msg))
	}
}

// resizeProgress keeps PodResizeInProgress while a running container does
// not run with its allocated resources, and clears it once all do, with
// the kubelet's ResizeCompleted event. A finished pod has no resize.
func (p *Pod) resizeProgress() {
	inProgress := p.podCgroupShrink
	if !p.finished && !p.stopping {
		for _, c := range p.resizable() {
			rec := p.containers[c.Name]
			if rec == nil || !rec.cur.Running {
				continue
			}
			if a := p.actualResources(p.ctx, c, rec); a != nil && !sameResources(c.Resources, *a) {
				inProgress = true
			}
		}
	}
	p.shared.mu.Lock()
	prev := p.shared.resizeInProgress
	switch {
	case inProgress && prev == nil:
		p.shared.resizeInProgress = p.resizeCondition(v1.PodResizeInProgress, nil, "", "", p.pod.Generation)
	case !inProgress && prev != nil:
		p.shared.resizeInProgress = nil
	}
	if p.finished {
		p.shared.resizePending = nil
	}
	p.shared.mu.Unlock()
	if !inProgress && prev != nil && !p.finished && !p.stopping {
		p.logger().Info("pod resize completed")
		p.event("", v1.EventTypeNormal, EventResizeCompleted, ResizeMessage("Pod resize completed", p.pod, prev.ObservedGeneration, ""))
	}
}

// resizeConditions are the resize conditions the status reports.
func (p *Pod) resizeConditions() []v1.PodCondition {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	var out []v1.PodCondition
	if p.finished {
		return nil
	}
	for _, c := range []*v1.PodCondition{p.shared.resizePending, p.shared.resizeInProgress} {
		if c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// statusResources sets a container status's resources and
// allocatedResources as the kubelet's convertToAPIContainerStatuses does:
// the allocated ones, with what a running container is configured with
// where the runtime reports it.
func (p *Pod) statusResources(c *v1.Container, rec *container, st *v1.ContainerStatus) {
	st.AllocatedResources = c.Resources.Requests.DeepCopy()
	res := c.Resources.DeepCopy()
	st.Resources = res
	if !rec.cur.Running || rec.actualFor != rec.cur.ID || rec.actual == nil {
		return
	}
	actual := rec.actual
	overlay := func(into, from v1.ResourceList, name v1.ResourceName) {
		if q, ok := from[name]; ok {
			into[name] = q.DeepCopy()
		}
	}
	if res.Limits != nil {
		overlay(res.Limits, actual.Limits, v1.ResourceCPU)
		overlay(res.Limits, actual.Limits, v1.ResourceMemory)
	}
	if res.Requests != nil {
		overlay(res.Requests, actual.Requests, v1.ResourceCPU)
		overlay(res.Requests, actual.Requests, v1.ResourceMemory)
	}
}

// sameResources compares the CPU and memory requests and limits, the
// resources a resize changes.
func sameResources(a, b v1.ResourceRequirements) bool {
	return a.Requests.Cpu().Cmp(*b.Requests.Cpu()) == 0 && a.Limits.Cpu().Cmp(*b.Limits.Cpu()) == 0 &&
		a.Requests.Memory().Cmp(*b.Requests.Memory()) == 0 && a.Limits.Memory().Cmp(*b.Limits.Memory()) == 0
}

// resizeNeedsRestart: a changed resource whose resize policy is
// RestartContainer (NotRequired is the default).
func resizeNeedsRestart(c *v1.Container, actual v1.ResourceRequirements) bool {
	changed := map[v1.ResourceName]bool{
		v1.ResourceCPU:    c.Resources.Requests.Cpu().Cmp(*actual.Requests.Cpu()) != 0 || c.Resources.Limits.Cpu().Cmp(*actual.Limits.Cpu()) != 0,
		v1.ResourceMemory: c.Resources.Requests.Memory().Cmp(*actual.Requests.Memory()) != 0 || c.Resources.Limits.Memory().Cmp(*actual.Limits.Memory()) != 0,
	}
	for _, pol := range c.ResizePolicy {
		if changed[pol.ResourceName] && pol.RestartPolicy == v1.RestartContainer {
			return true
		}
	}
	return false
}

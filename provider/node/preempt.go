package node

import (
	"fmt"
	"math"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The kubelet's preemption of a critical pod's admission
// (pkg/kubelet/preemption): a critical pod (static, mirror, or of a
// system priority) the node lacks resources for is admitted after pods it
// may preempt are stopped.
const (
	PreemptReason  = "Preempting"
	PreemptMessage = "Preempted in order to admit critical pod"
	// PreemptConditionMessage is the DisruptionTarget condition's.
	PreemptConditionMessage = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// requirement is a resource short to admit a pod, and how much (CPU in
// millicores, pods in pods, the rest in units).
type requirement struct {
	name     v1.ResourceName
	quantity int64
}

type requirements []requirement

// PodsToPreempt is the kubelet's choice of the pods to stop so that pod, a
// critical pod the node lacks resources for, fits among running: only pods
// it may preempt (not critical, or of a lower priority), the fewest and
// closest to what is short, best-effort ones first, then burstable, then
// guaranteed. An error says no such set exists (or pod is not critical).
func (n *Node) PodsToPreempt(pod *v1.Pod, running []*v1.Pod) ([]*v1.Pod, error) {
	if !IsCriticalPod(pod) {
		return nil, fmt.Errorf("pod %s/%s is not critical", pod.Namespace, pod.Name)
	}
	reqs := insufficient(pod, n.allocatableForAdmission(), running)
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no resource is short")
	}
	return podsToPreempt(pod, running, reqs)
}

// insufficient lists every resource short for pod among running, as the
// kubelet's InsufficientResourceErrors (pods, cpu, memory, ephemeral
// storage, the rest).
func insufficient(pod *v1.Pod, alloc v1.ResourceList, running []*v1.Pod) requirements {
	var out requirements
	if maxPods := alloc.Pods().Value(); int64(len(running))+1 > maxPods {
		out = append(out, requirement{v1.ResourcePods, int64(len(running)) + 1 - maxPods})
	}
	used := v1.ResourceList{}
	for _, p := range running {
		addResources(used, podRequests(p))
	}
	req := podRequests(pod)
	names := make([]string, 0, len(req))
	for name := range req {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, s := range names {
		name := v1.ResourceName(s)
		r := req[name]
		if r.IsZero() {
			continue
		}
		capQ, has := alloc[name]
		if !has && isExtendedResource(name) {
			continue
		}
		u := used[name]
		if short := quantity(name, r) + quantity(name, u) - quantity(name, capQ); short > 0 {
			out = append(out, requirement{name, short})
		}
	}
	return out
}

func quantity(name v1.ResourceName, q resource.Quantity) int64 {
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// request is the pod's request of a resource as the preemption counts it.
func request(pod *v1.Pod, name v1.ResourceName) int64 {
	if name == v1.ResourcePods {
		return 1
	}
	q, ok := podRequests(pod)[name]
	if !ok {
		return 0
	}
	return quantity(name, q)
}

// preemptable is the kubelet's kubetypes.Preemptable.
func preemptable(preemptor, preemptee *v1.Pod) bool {
	if IsCriticalPod(preemptor) && !IsCriticalPod(preemptee) {
		return true
	}
	if preemptor.Spec.Priority != nil && preemptee.Spec.Priority != nil {
		return *preemptor.Spec.Priority > *preemptee.Spec.Priority
	}
	return false
}

// podsToPreempt is the kubelet's getPodsToPreempt.
func podsToPreempt(pod *v1.Pod, pods []*v1.Pod, reqs requirements) ([]*v1.Pod, error) {
	var bestEffort, burstable, guaranteed []*v1.Pod
	for _, p := range pods {
		if !preemptable(pod, p) {
			continue
		}
		switch QOSClass(p) {
		case v1.PodQOSBestEffort:
			bestEffort = append(bestEffort, p)
		case v1.PodQOSBurstable:
			burstable = append(burstable, p)
		default:
			guaranteed = append(guaranteed, p)
		}
	}
	cat := func(lists ...[]*v1.Pod) []*v1.Pod {
		var out []*v1.Pod
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	if left := reqs.subtract(cat(bestEffort, burstable, guaranteed)...); len(left) > 0 {
		return nil, fmt.Errorf("no set of running pods found to reclaim resources: %s", left)
	}
	g, err := byDistance(guaranteed, reqs.subtract(cat(bestEffort, burstable)...))
	if err != nil {
		return nil, err
	}
	b, err := byDistance(burstable, reqs.subtract(cat(bestEffort, g)...))
	if err != nil {
		return nil, err
	}
	be, err := byDistance(bestEffort, reqs.subtract(cat(b, g)...))
	if err != nil {
		return nil, err
	}
	return cat(be, b, g), nil
}

// byDistance is the kubelet's getPodsToPreemptByDistance: repeatedly the pod
// closest to what is still short (the smaller request on a tie).
func byDistance(pods []*v1.Pod, reqs requirements) ([]*v1.Pod, error) {
	pods = append([]*v1.Pod(nil), pods...)
	var out []*v1.Pod
	for len(reqs) > 0 {
		if len(pods) == 0 {
			return nil, fmt.Errorf("no set of running pods found to reclaim resources: %s", reqs)
		}
		best, bestDist := 0, float64(len(reqs)+1)
		for i, p := range pods {
			d := reqs.distance(p)
			if d < bestDist || (d == bestDist && smallerRequest(p, pods[best])) {
				best, bestDist = i, d
			}
		}
		reqs = reqs.subtract(pods[best])
		out = append(out, pods[best])
		pods[best] = pods[len(pods)-1]
		pods = pods[:len(pods)-1]
	}
	return out, nil
}

func (r requirements) distance(pod *v1.Pod) float64 {
	d := 0.0
	for _, req := range r {
		if left := float64(req.quantity - request(pod, req.name)); left > 0 {
			d += math.Pow(left/float64(req.quantity), 2)
		}
	}
	return d
}

func (r requirements) subtract(pods ...*v1.Pod) requirements {
	var out requirements
	for _, req := range r {
		q := req.quantity
		for _, p := range pods {
			q -= request(p, req.name)
			if q <= 0 {
				break
			}
		}
		if q > 0 {
			out = append(out, requirement{req.name, q})
		}
	}
	return out
}

func (r requirements) String() string {
	parts := make([]string, 0, len(r))
	for _, req := range r {
		parts = append(parts, fmt.Sprintf("(res: %v, q: %d)", req.name, req.quantity))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// smallerRequest orders by memory, then CPU request.
func smallerRequest(a, b *v1.Pod) bool {
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		ra, rb := request(a, name), request(b, name)
		if ra != rb {
			return ra < rb
		}
	}
	return true
}

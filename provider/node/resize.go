package node

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// AdmitResize is the kubelet's canResizePod: whether the node can give a
// running pod the resources its spec now asks for. others are the other
// pods the node runs, with their allocated resources. A resize above the
// node's allocatable can never fit (Infeasible); one that does not fit
// beside the others now waits (Deferred, with the message of the admission
// that failed) and is tried again when resources are freed.
func (n *Node) AdmitResize(pod *v1.Pod, others []*v1.Pod) (reason, msg string, ok bool) {
	reason, msg, ok = resizeFeasible(pod, n.Allocatable())
	if !ok {
		return reason, msg, false
	}
	if _, msg, ok := admitPressure(pod, n.pressureConditions()); !ok {
		return v1.PodReasonDeferred, msg, false
	}
	if _, msg, ok := admitPredicates(pod, n.apiNode(), n.allocatableForAdmission(), others); !ok {
		return v1.PodReasonDeferred, msg, false
	}
	if n.ShuttingDown() {
		return v1.PodReasonDeferred, "Pod was rejected as the node is shutting down.", false
	}
	return "", "", true
}

// resizeFeasible rejects what the node could never give: a static pod's
// resize, or CPU or memory requests above its allocatable.
func resizeFeasible(pod *v1.Pod, alloc v1.ResourceList) (string, string, bool) {
	if src := pod.Annotations["kubernetes.io/config.source"]; src != "" && src != "api" {
		return v1.PodReasonInfeasible, "In-place resize of static-pods is not supported", false
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{ExcludeOverhead: true})
	// Overhead counts for a resource the pod requests at all, as in the
	// kubelet's GetResourceRequest.
	request := func(name v1.ResourceName) int64 {
		q := req[name]
		if o, ok := pod.Spec.Overhead[name]; ok && !q.IsZero() {
			q.Add(o)
		}
		if name == v1.ResourceCPU {
			return q.MilliValue()
		}
		return q.Value()
	}
	cpu, mem := request(v1.ResourceCPU), request(v1.ResourceMemory)
	cpuAvail, memAvail := alloc.Cpu().MilliValue(), alloc.Memory().Value()
	switch {
	case mem > memAvail:
		return v1.PodReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: memory, requested: %d, capacity: %d", mem, memAvail), false
	case cpu > cpuAvail:
		return v1.PodReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: cpu, requested: %d, capacity: %d", cpu, cpuAvail), false
	}
	return "", "", true
}

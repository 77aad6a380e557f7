package node

import v1 "k8s.io/api/core/v1"

// QOSClass is the pod's QoS class: the apiserver's when set, else computed
// the same way. Every container (or the pod's own resources) with cpu and
// memory limits equal to requests: Guaranteed; nothing set: BestEffort.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	reqs := []v1.ResourceRequirements{}
	if pod.Spec.Resources != nil {
		reqs = append(reqs, *pod.Spec.Resources)
	} else {
		for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			reqs = append(reqs, c.Resources)
		}
	}
	anySet, guaranteed := false, true
	for _, r := range reqs {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			req, hasReq := r.Requests[name]
			lim, hasLim := r.Limits[name]
			if (hasReq && !req.IsZero()) || (hasLim && !lim.IsZero()) {
				anySet = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !anySet:
		return v1.PodQOSBestEffort
	case guaranteed:
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

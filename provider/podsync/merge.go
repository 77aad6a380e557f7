package podsync

import (
	"github.com/hostlet/hostlet/lifecycle"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mergeStatus is want with the conditions as the kubelet's mergePodStatus
// writes them: the node's own from want, DisruptionTarget (shared with
// the node: eviction, shutdown) from want when want has it, every other
// one as the API has it, so that a condition someone wrote after the
// worker last saw the pod is not undone.
func mergeStatus(api, want *v1.PodStatus) v1.PodStatus {
	st := *want.DeepCopy()
	conds := make([]v1.PodCondition, 0, len(api.Conditions)+len(want.Conditions))
	for _, c := range api.Conditions {
		if !lifecycle.IsOwnedCondition(c.Type) && !(c.Type == v1.DisruptionTarget && hasCondition(want.Conditions, c.Type)) {
			conds = append(conds, c)
		}
	}
	for _, c := range want.Conditions {
		if lifecycle.IsOwnedCondition(c.Type) || c.Type == v1.DisruptionTarget {
			conds = append(conds, c)
		}
	}
	st.Conditions = conds
	if len(st.Conditions) == 0 {
		st.Conditions = nil
	}
	return st
}

func hasCondition(cs []v1.PodCondition, t v1.PodConditionType) bool {
	for _, c := range cs {
		if c.Type == t {
			return true
		}
	}
	return false
}

// normalize truncates the status's times to the second, as the API stores
// them (the kubelet's normalizeStatus), so that a status compares equal to
// the API's copy of it.
func normalize(st v1.PodStatus) v1.PodStatus {
	sec := func(t *metav1.Time) {
		if t != nil {
			*t = t.Rfc3339Copy()
		}
	}
	state := func(s *v1.ContainerState) {
		if s.Running != nil {
			sec(&s.Running.StartedAt)
		}
		if s.Terminated != nil {
			sec(&s.Terminated.StartedAt)
			sec(&s.Terminated.FinishedAt)
		}
	}
	sec(st.StartTime)
	for i := range st.Conditions {
		sec(&st.Conditions[i].LastProbeTime)
		sec(&st.Conditions[i].LastTransitionTime)
	}
	for _, cs := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range cs {
			state(&cs[i].State)
			state(&cs[i].LastTerminationState)
		}
	}
	return st
}

package lifecycle

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons the kubelet gives on pod conditions.
const (
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
)

// ownedConditions are the condition types the node writes; every other type
// (readiness gates, DisruptionTarget, ...) belongs to someone else and is kept.
var ownedConditions = map[v1.PodConditionType]bool{
	v1.PodScheduled:              true,
	v1.PodReadyToStartContainers: true,
	v1.PodInitialized:            true,
	v1.ContainersReady:           true,
	v1.PodReady:                  true,
	v1.PodResizePending:          true,
	v1.PodResizeInProgress:       true,
}

// IsOwnedCondition reports whether hostlet computes this condition type.
func IsOwnedCondition(t v1.PodConditionType) bool { return ownedConditions[t] }

func namesOf(names []string) string { return "[" + strings.Join(names, " ") + "]" }

// Conditions computes the node-owned pod conditions, in the kubelet's order.
// others are the conditions written by others (for readiness gates).
func Conditions(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus, phase v1.PodPhase, sandboxReady bool, others []v1.PodCondition) []v1.PodCondition {
	spec := &pod.Spec
	gen := pod.Generation
	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		c := v1.PodCondition{Type: t, Status: v1.ConditionTrue, ObservedGeneration: gen}
		if !ok {
			c.Status, c.Reason, c.Message = v1.ConditionFalse, reason, msg
		}
		return c
	}

	// PodReadyToStartContainers follows the sandbox.
	out := []v1.PodCondition{cond(v1.PodReadyToStartContainers, sandboxReady, "", "")}

	// Initialized.
	var unknownInit, incomplete []string
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		st, ok := findStatus(initStatuses, c.Name)
		switch {
		case !ok:
			unknownInit = append(unknownInit, c.Name)
		case IsSidecar(c) && (st.Started == nil || !*st.Started), !IsSidecar(c) && !st.Ready:
			incomplete = append(incomplete, c.Name)
		}
	}
	var initialized v1.PodCondition
	switch {
	case phase == v1.PodSucceeded && len(unknownInit) == 0:
		initialized = v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue, Reason: ReasonPodCompleted, ObservedGeneration: gen}
	case anyRegularStarted(statuses):
		initialized = cond(v1.PodInitialized, true, "", "")
	default:
		var msgs []string
		if len(unknownInit) > 0 {
			msgs = append(msgs, "containers with unknown status: "+namesOf(unknownInit))
		}
		if len(incomplete) > 0 {
			msgs = append(msgs, "containers with incomplete status: "+namesOf(incomplete))
		}
		initialized = cond(v1.PodInitialized, len(msgs) == 0, ReasonContainersNotInitialized, strings.Join(msgs, ", "))
	}
	out = append(out, initialized)

	// ContainersReady and Ready.
	containersReady := containersReadyCondition(pod, initStatuses, statuses, phase)
	ready := containersReady
	ready.Type = v1.PodReady
	if containersReady.Status == v1.ConditionTrue {
		var msgs []string
		for _, g := range spec.ReadinessGates {
			var found *v1.PodCondition
			for i := range others {
				if others[i].Type == g.ConditionType {
					found = &others[i]
				}
			}
			if found == nil {
				msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(g.ConditionType)))
			} else if found.Status != v1.ConditionTrue {
				msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(g.ConditionType), found.Status))
			}
		}
		ready = cond(v1.PodReady, len(msgs) == 0, ReasonReadinessGatesNotReady, strings.Join(msgs, ", "))
	}
	out = append(out, containersReady, ready)
	out = append(out, v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: gen})
	return out
}

func anyRegularStarted(statuses []v1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

func containersReadyCondition(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	gen := pod.Generation
	var unknown, unready []string
	check := func(name string, list []v1.ContainerStatus) {
		if st, ok := findStatus(list, name); !ok {
			unknown = append(unknown, name)
		} else if !st.Ready {
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if IsSidecar(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name, initStatuses)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name, statuses)
	}
	if (phase == v1.PodSucceeded && len(unknown) == 0) || phase == v1.PodFailed {
		reason := ReasonPodCompleted
		if phase == v1.PodFailed {
			reason = ReasonPodFailed
		}
		return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionFalse, Reason: reason, ObservedGeneration: gen}
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, "containers with unknown status: "+namesOf(unknown))
	}
	if len(unready) > 0 {
		msgs = append(msgs, "containers with unready status: "+namesOf(unready))
	}
	if len(msgs) > 0 {
		return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionFalse, Reason: ReasonContainersNotReady, Message: strings.Join(msgs, ", "), ObservedGeneration: gen}
	}
	return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionTrue, ObservedGeneration: gen}
}

// MergeConditions returns the node-owned conditions computed now plus every
// condition owned by others from current, carrying lastTransitionTime over
// from previous when a condition's status did not change.
func MergeConditions(computed, current []v1.PodCondition, now metav1.Time) []v1.PodCondition {
	prev := map[v1.PodConditionType]v1.PodCondition{}
	for _, c := range current {
		prev[c.Type] = c
	}
	out := make([]v1.PodCondition, 0, len(computed)+len(current))
	for _, c := range computed {
		if p, ok := prev[c.Type]; ok && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
			c.LastProbeTime = p.LastProbeTime
		} else {
			c.LastTransitionTime = now
		}
		out = append(out, c)
	}
	mine := map[v1.PodConditionType]bool{}
	for _, c := range computed {
		mine[c.Type] = true
	}
	for _, c := range current {
		if !IsOwnedCondition(c.Type) && !mine[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

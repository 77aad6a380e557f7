package lifecycle

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func terminatedState(info ContainerInfo) *v1.ContainerStateTerminated {
	reason := info.Reason
	if reason == "" {
		reason = "Completed"
		if info.ExitCode != 0 {
			reason = "Error"
		}
	}
	return &v1.ContainerStateTerminated{
		ExitCode:    info.ExitCode,
		Reason:      reason,
		Message:     info.Message,
		StartedAt:   metav1.NewTime(info.StartedAt),
		FinishedAt:  metav1.NewTime(info.FinishedAt),
		ContainerID: containerID(info.ID),
	}
}

func containerID(id string) string {
	if id == "" {
		return ""
	}
	return "containerd://" + id
}

// containerStatus is the API status of one container. pending is the waiting
// reason of a container that was never created.
func (p *Pod) containerStatus(c *v1.Container, pending string, sidecar, init bool) v1.ContainerStatus {
	st := v1.ContainerStatus{Name: c.Name, Image: c.Image}
	f := false
	st.Started = &f
	if p.cfg.VolumeMounts != nil {
		st.VolumeMounts = p.cfg.VolumeMounts(p.pod, c)
	}
	rec := p.containers[c.Name]
	if rec == nil || rec.cur.ID == "" {
		reason, msg := pending, ""
		if rec != nil && rec.waiting != nil {
			reason, msg = rec.waiting.Reason, rec.waiting.Message
		}
		st.State.Waiting = &v1.ContainerStateWaiting{Reason: reason, Message: msg}
		return st
	}
	cur := rec.cur
	p.statusResources(c, rec, &st)
	st.ContainerID = containerID(cur.ID)
	st.RestartCount = int32(cur.Attempt)
	if cur.ImageID != "" {
		st.ImageID = cur.ImageID
	}
	if cur.Image != "" {
		st.Image = cur.Image
	}
	// As the kubelet, whatever the state: what the runtime says the
	// process runs (or ran) as.
	st.User = cur.User.DeepCopy()
	// lastState is the instance before the newest one the runtime still
	// has. The kubelet removes all but the newest dead instance of a
	// container at each exit, so the one before shows only while its
	// successor runs (or is created); a container waiting for its restart
	// shows its own exit, and one done for good shows none.
	if rec.prev != nil && rec.prev.Exited && !cur.Exited {
		st.LastTerminationState.Terminated = terminatedState(*rec.prev)
	}
	switch {
	case cur.Running:
		st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cur.StartedAt)}
		started := rec.started
		st.Started = &started
		// Readiness follows the readiness probe once started (true without
		// one), is false from the start of termination, and a regular init
		// container is ready only once it has completed.
		ready := started
		if c.ReadinessProbe != nil {
			ready = started && rec.ready
		}
		st.Ready = ready && !p.finished && !p.stopping && (!init || sidecar)
	case cur.Exited && rec.waiting != nil && !p.finished:
		// Waiting for its restart: the exit shows as lastState.
		st.State.Waiting = rec.waiting.DeepCopy()
		st.LastTerminationState.Terminated = terminatedState(cur)
	case cur.Exited:
		st.State.Terminated = terminatedState(cur)
		// A completed regular init container counts as ready.
		st.Ready = init && !sidecar && cur.ExitCode == 0
	default:
		st.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	return st
}

func (p *Pod) computeStatus() v1.PodStatus {
	spec := &p.pod.Spec
	var initStatuses, statuses []v1.ContainerStatus
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		initStatuses = append(initStatuses, p.containerStatus(c, "PodInitializing", IsSidecar(c), true))
	}
	// Main containers wait as PodInitializing only behind init containers.
	pending := "ContainerCreating"
	if !p.initialized && len(spec.InitContainers) > 0 {
		pending = "PodInitializing"
	}
	for i := range spec.Containers {
		statuses = append(statuses, p.containerStatus(&spec.Containers[i], pending, false, false))
	}
	ephemeral := p.ephemeralStatuses(pending)
	phase := Phase(spec, initStatuses, statuses, p.finished, p.initialized)
	if p.finished && !Terminal(phase) {
		// A pod that will run nothing more ends terminal (e.g. deleted
		// before anything started), as the kubelet does since 1.27.
		phase = v1.PodFailed
		if allSucceeded(statuses) {
			phase = v1.PodSucceeded
		}
	}
	if p.failure != nil {
		phase = v1.PodFailed
	}
	// Conditions follow the phase computed now, but the reported phase turns
	// terminal only once nothing of the pod can run any more (containers and
	// sandbox stopped), as the kubelet's status manager holds it back; the
	// first terminal status is then complete, sandbox gone included.
	reported, reason, message := phase, "", ""
	if p.failure != nil {
		reason, message = p.failure.Reason, p.failure.Message
	}
	if Terminal(phase) && !p.finished {
		reported, reason, message = p.pod.Status.Phase, p.pod.Status.Reason, p.pod.Status.Message
		if s := p.Status(); s != nil {
			reported, reason, message = s.Status.Phase, s.Status.Reason, s.Status.Message
		}
		if Terminal(reported) {
			reported, reason, message = phase, "", ""
		} else if reported == "" {
			reported = v1.PodPending
		}
	}
	// The kubelet lists init container statuses in the spec's order (its
	// SortStatusesOfInitContainers), the others sorted by name.
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Name < statuses[j].Name })
	sort.Slice(ephemeral, func(i, j int) bool { return ephemeral[i].Name < ephemeral[j].Name })

	old := p.pod.Status
	var others []v1.PodCondition
	for _, c := range old.Conditions {
		if !IsOwnedCondition(c.Type) {
			others = append(others, c)
		}
	}
	computed := Conditions(p.pod, initStatuses, statuses, phase, p.sandboxOK, others)
	if p.failure != nil {
		computed = append(computed, p.failure.Conditions...)
	}
	prevConds := old.Conditions
	if s := p.Status(); s != nil {
		// Transition times of our own conditions come from what we last
		// computed, which may not have reached the API yet.
		prevConds = mergeOwned(s.Status.Conditions, old.Conditions, p.failure)
	}
	st := v1.PodStatus{
		Phase:                      reported,
		Reason:                     reason,
		Message:                    message,
		Conditions:                 append(p.resizeConditions(), MergeConditions(computed, prevConds, metav1.NewTime(p.clock.Now().Truncate(time.Second)))...),
		StartTime:                  p.startTime.DeepCopy(),
		QOSClass:                   old.QOSClass,
		InitContainerStatuses:      initStatuses,
		ContainerStatuses:          statuses,
		EphemeralContainerStatuses: ephemeral,
		ObservedGeneration:         p.pod.Generation,
		// Not the node's: the resourceclaim controller and the scheduler
		// write them, and NodeRestriction refuses a node's status update
		// that changes them (the kubelet's status manager keeps them too).
		ResourceClaimStatuses:       old.ResourceClaimStatuses,
		ExtendedResourceClaimStatus: old.ExtendedResourceClaimStatus,
	}
	if st.StartTime.IsZero() {
		st.StartTime = nil
	}
	for _, ip := range p.cfg.HostIPs {
		st.HostIPs = append(st.HostIPs, v1.HostIP{IP: ip})
	}
	if len(st.HostIPs) > 0 {
		st.HostIP = st.HostIPs[0].IP
	}
	// Pod IPs stay reported after the sandbox is gone, as the kubelet keeps them.
	for _, ip := range p.podIPs {
		st.PodIPs = append(st.PodIPs, v1.PodIP{IP: ip})
	}
	if len(st.PodIPs) > 0 {
		st.PodIP = st.PodIPs[0].IP
	}
	return st
}

// mergeOwned takes the conditions hostlet sets (its own, and those of a
// stop) from mine and the rest from api.
func mergeOwned(mine, api []v1.PodCondition, stop *StopRequest) []v1.PodCondition {
	ours := map[v1.PodConditionType]bool{}
	if stop != nil {
		for _, c := range stop.Conditions {
			ours[c.Type] = true
		}
	}
	var out []v1.PodCondition
	for _, c := range mine {
		if IsOwnedCondition(c.Type) || ours[c.Type] {
			out = append(out, c)
		}
	}
	for _, c := range api {
		if !IsOwnedCondition(c.Type) && !ours[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

// Terminal tells a phase a pod never leaves: Succeeded or Failed.
func Terminal(phase v1.PodPhase) bool {
	return phase == v1.PodSucceeded || phase == v1.PodFailed
}

func allSucceeded(statuses []v1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			return false
		}
	}
	return true
}

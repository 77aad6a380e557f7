package lifecycle

import (
	v1 "k8s.io/api/core/v1"
)

func findStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for _, s := range statuses {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}

// Phase computes the pod phase from container statuses exactly as the
// kubelet's getPhase does (with ContainerRestartRules enabled).
// terminal says the pod will run nothing more; initialized that it has been
// through initialization once.
func Phase(spec *v1.PodSpec, initStatuses, statuses []v1.ContainerStatus, terminal, initialized bool) v1.PodPhase {
	pendingInit, pendingSidecars, failedInitNoRestart := 0, 0, 0
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if IsSidecar(c) {
			continue
		}
		st, ok := findStatus(initStatuses, c.Name)
		switch {
		case !ok, st.State.Running != nil:
			pendingInit++
		case st.State.Terminated != nil:
			if code := st.State.Terminated.ExitCode; code != 0 && !ShouldRestart(c, spec, code) {
				failedInitNoRestart++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				if t.ExitCode != 0 && !ShouldRestart(c, spec, t.ExitCode) {
					failedInitNoRestart++
				}
			} else {
				pendingInit++
			}
		default:
			pendingInit++
		}
	}
	unknown, running, waiting, stopped, stoppedNoRestart, succeeded := 0, 0, 0, 0, 0, 0
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if !IsSidecar(c) {
			continue
		}
		st, ok := findStatus(initStatuses, c.Name)
		switch {
		case !ok:
			unknown++
		case st.State.Running != nil:
			if st.Started == nil || !*st.Started {
				pendingSidecars++
			}
			running++
		case st.State.Terminated != nil:
			// Stopped sidecars do not count toward the phase.
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated == nil {
				pendingSidecars++
				waiting++
			}
		default:
			pendingSidecars++
			unknown++
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		st, ok := findStatus(statuses, c.Name)
		switch {
		case !ok:
			unknown++
		case st.State.Running != nil:
			running++
		case st.State.Terminated != nil:
			stopped++
			code := st.State.Terminated.ExitCode
			if !ShouldRestart(c, spec, code) {
				stoppedNoRestart++
			}
			if code == 0 {
				succeeded++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				stopped++
				if !ShouldRestart(c, spec, t.ExitCode) {
					stoppedNoRestart++
				}
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}
	if failedInitNoRestart > 0 {
		return v1.PodFailed
	}
	switch {
	case pendingInit > 0 || (pendingSidecars > 0 && !initialized), waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if terminal || stopped == stoppedNoRestart {
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		}
		return v1.PodRunning
	default:
		return v1.PodPending
	}
}

package lifecycle

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ephemeralContainers are the pod's ephemeral containers (kubectl debug) as
// containers: they hold the same fields, the rest left empty by validation.
func ephemeralContainers(spec *v1.PodSpec) []*v1.Container {
	out := make([]*v1.Container, 0, len(spec.EphemeralContainers))
	for i := range spec.EphemeralContainers {
		out = append(out, (*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}

// startEphemeral starts the ephemeral containers that were never created, as
// the kubelet does whatever the pod's initialization: one that ran (or failed
// to start after it was created) is never started again. A start that made
// nothing (an image pull) is retried with its back-off; it returns when.
func (p *Pod) startEphemeral(ctx context.Context) time.Time {
	var wakeAt time.Time
	for _, c := range ephemeralContainers(&p.pod.Spec) {
		rec := p.record(c.Name)
		if rec.cur.ID != "" {
			continue
		}
		if t := p.ensureRunning(ctx, c, rec); !t.IsZero() && (wakeAt.IsZero() || t.Before(wakeAt)) {
			wakeAt = t
		}
	}
	return wakeAt
}

// ephemeralStatuses are the statuses of the ephemeral containers, computed
// as the kubelet does for regular ones but never ready or started: no probe
// ever runs in them.
func (p *Pod) ephemeralStatuses(pending string) []v1.ContainerStatus {
	var out []v1.ContainerStatus
	for _, c := range ephemeralContainers(&p.pod.Spec) {
		st := p.containerStatus(c, pending, false, false)
		st.Ready, st.Started = false, nil
		out = append(out, st)
	}
	return out
}

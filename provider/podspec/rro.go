package podspec

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

// resolveRecursiveReadOnly is the kubelet's: whether a volumeMount is made
// recursively read-only, given whether the pod's runtime handler can; an
// error for a mode that cannot be honoured (a writable or propagating
// mount, or Enabled where the runtime cannot), IfPossible falling back to
// a plain read-only mount.
func resolveRecursiveReadOnly(m v1.VolumeMount, runtimeSupportsRRO bool) (bool, error) {
	if m.RecursiveReadOnly == nil || *m.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !m.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", m.Name)
	}
	if m.MountPropagation != nil && *m.MountPropagation != v1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q",
			m.Name, *m.MountPropagation)
	}
	switch rroMode := *m.RecursiveReadOnly; rroMode {
	case v1.RecursiveReadOnlyIfPossible:
		return runtimeSupportsRRO, nil
	case v1.RecursiveReadOnlyEnabled:
		if !runtimeSupportsRRO {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", m.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", rroMode)
	}
}

// supportsRecursiveReadOnly is the kubelet's
// runtimeClassSupportsRecursiveReadOnlyMounts: the feature of the pod's
// runtime handler, false when it cannot be looked up.
func (r *Runtime) supportsRecursiveReadOnly(ctx context.Context, pod *v1.Pod) bool {
	name, err := r.lookupRuntimeHandler(ctx, pod.Spec.RuntimeClassName)
	if err != nil {
		return false
	}
	h, err := r.rt.RuntimeHandler(ctx, name)
	if err != nil {
		return false
	}
	return h.RecursiveReadOnlyMounts
}

// VolumeMountStatuses are a container's status.volumeMounts as the kubelet
// reports them (for every container, whatever its state): each mount, and
// for a read-only one whether it is recursively so.
func (r *Runtime) VolumeMountStatuses(ctx context.Context, pod *v1.Pod, c *v1.Container) []v1.VolumeMountStatus {
	if len(c.VolumeMounts) == 0 {
		return nil
	}
	rro := false
	checked := false
	out := make([]v1.VolumeMountStatus, 0, len(c.VolumeMounts))
	for _, m := range c.VolumeMounts {
		st := v1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			if !checked && m.RecursiveReadOnly != nil {
				rro, checked = r.supportsRecursiveReadOnly(ctx, pod), true
			}
			mode := v1.RecursiveReadOnlyDisabled
			if b, err := resolveRecursiveReadOnly(m, rro); err != nil {
				log.WithError(err).WithField("mode", *m.RecursiveReadOnly).Debug("failed to resolve recursive read-only mode")
			} else if b {
				mode = v1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}

package podspec

import (
	"context"
	"fmt"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

// ephemeralContainer finds an ephemeral container of the pod by name.
func ephemeralContainer(pod *v1.Pod, name string) *v1.EphemeralContainer {
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return &pod.Spec.EphemeralContainers[i]
		}
	}
	return nil
}

// targetPIDNamespace is the PID namespace an ephemeral container with a
// targetContainerName joins: its target's running instance's, as the
// kubelet asks CRI for (NamespaceMode_TARGET). Empty when the container has
// no target, or the pod's containers share one namespace already (the host's
// or the pod's). A target not running is the kubelet's
// CreateContainerConfigError, retried; every error is one.
func (r *Runtime) targetPIDNamespace(ctx context.Context, pod *v1.Pod, name string) (string, error) {
	ec := ephemeralContainer(pod, name)
	if ec == nil || ec.TargetContainerName == "" || pod.Spec.HostPID ||
		(pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace) {
		return "", nil
	}
	sts, err := r.rt.ListContainers(ctx, string(pod.UID))
	if err != nil {
		return "", configError(err)
	}
	var target *runtime.ContainerStatus
	for i := range sts {
		if st := &sts[i]; st.Name == ec.TargetContainerName && st.State == runtime.StateRunning &&
			(target == nil || st.Attempt > target.Attempt) {
			target = st
		}
	}
	if target == nil {
		return "", configError(fmt.Errorf("unable to find target container %v", ec.TargetContainerName))
	}
	ns, err := r.rt.PIDNamespace(ctx, target.ID)
	if err != nil {
		return "", configError(err)
	}
	return ns, nil
}

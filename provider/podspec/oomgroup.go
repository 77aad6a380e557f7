package podspec

import (
	"errors"

	"k8s.io/utils/ptr"
)

// OOMKillGroup is the kubelet's choice of what an OOM kill in a container
// takes (singleProcessOOMKill): on cgroup v2 the whole container, every
// process of its cgroup (memory.oom.group=1), unless singleProcessOOMKill
// is true; on cgroup v1, which has no group kill, the kernel's one process,
// and singleProcessOOMKill: false is refused with the kubelet's message.
func OOMKillGroup(cgroupV2 bool, singleProcessOOMKill *bool) (bool, error) {
	if !cgroupV2 {
		if singleProcessOOMKill != nil && !*singleProcessOOMKill {
			return false, errors.New("invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1")
		}
		return false, nil
	}
	return !ptr.Deref(singleProcessOOMKill, false), nil
}

// withOOMGroup adds memory.oom.group=1 to a container's cgroup v2 files
// when the node kills whole containers (Config.OOMKillGroup), as the
// kubelet's calculateLinuxResources.
func (r *Runtime) withOOMGroup(unified map[string]string) map[string]string {
	if !r.cfg.OOMKillGroup {
		return unified
	}
	if unified == nil {
		unified = map[string]string{}
	}
	unified["memory.oom.group"] = "1"
	return unified
}

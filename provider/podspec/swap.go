package podspec

import (
	"strconv"

	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

// Swap is the node's swap setting (the kubelet's memorySwap.swapBehavior)
// and what the host gives it.
type Swap struct {
	// Behavior is runtime.SwapNoSwap (also when empty) or
	// runtime.SwapLimitedSwap.
	Behavior string
	// Controller: the kernel accounts swap per cgroup; without it nothing
	// is set, as the kubelet does.
	Controller bool
	V2         bool
	// MemoryCapacity and SwapCapacity are the node's, in bytes.
	MemoryCapacity, SwapCapacity int64
}

// behavior is the kubelet's GetContainerSwapBehavior: LimitedSwap only for
// containers of non-critical Burstable pods on cgroup v2 that request
// memory below their limit.
func (s Swap) behavior(pod *v1.Pod, c *v1.Container) string {
	if s.Behavior != runtime.SwapLimitedSwap || !s.Controller || !s.V2 || node.IsCriticalPod(pod) {
		return runtime.SwapNoSwap
	}
	req, limit := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if node.QOSClass(pod) != v1.PodQOSBurstable || (req.IsZero() && limit.IsZero()) || req.Cmp(*limit) == 0 {
		return runtime.SwapNoSwap
	}
	return runtime.SwapLimitedSwap
}

// container is the kubelet's configureContainerSwapResources: NoSwap is
// the memory limit as memory+swap on v1 (no swap beyond the limit) and
// memory.swap.max 0 on v2; LimitedSwap is memory.swap.max of
// LimitedSwapBytes (0 when that cannot be computed).
func (s Swap) container(pod *v1.Pod, c *v1.Container, memoryLimit int64) (memorySwap int64, unified map[string]string) {
	if !s.Controller {
		return 0, nil
	}
	if !s.V2 {
		return memoryLimit, nil
	}
	swap := int64(0)
	if s.behavior(pod, c) == runtime.SwapLimitedSwap {
		if v, ok := LimitedSwapBytes(c.Resources.Requests.Memory().Value(), s.MemoryCapacity, s.SwapCapacity); ok {
			swap = v
		}
	}
	return 0, map[string]string{"memory.swap.max": strconv.FormatInt(swap, 10)}
}

// LimitedSwapBytes is the kubelet's calcSwapForBurstablePods (KEP 2400):
// the container's share of the node's memory, of the node's swap:
// (request / memory capacity) * swap capacity. ok is false when the node
// has no memory or the request exceeds it.
func LimitedSwapBytes(request, memoryCapacity, swapCapacity int64) (int64, bool) {
	if memoryCapacity <= 0 || request > memoryCapacity {
		return 0, false
	}
	return int64(float64(request) / float64(memoryCapacity) * float64(swapCapacity)), true
}

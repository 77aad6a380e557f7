package podspec

import (
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

// The kubelet's calcSwapForBurstablePods: request/capacity of the swap.
func TestLimitedSwapBytes(t *testing.T) {
	const gi = int64(1 << 30)
	for _, tc := range []struct {
		request, memory, swap, want int64
		ok                          bool
	}{
		{request: 1 * gi, memory: 8 * gi, swap: 4 * gi, want: gi / 2, ok: true},
		{request: 2 * gi, memory: 16 * gi, swap: 1 * gi, want: gi / 8, ok: true},
		{request: 100 << 20, memory: 24 * gi, swap: 0, want: 0, ok: true},
		{request: 9 * gi, memory: 8 * gi, swap: 4 * gi, ok: false},
		{request: 1, memory: 0, swap: 4 * gi, ok: false},
	} {
		got, ok := LimitedSwapBytes(tc.request, tc.memory, tc.swap)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LimitedSwapBytes(%d, %d, %d) = %d, %v; want %d, %v", tc.request, tc.memory, tc.swap, got, ok, tc.want, tc.ok)
		}
	}
}

// Which containers swap, and what the spec gets, per cgroup version.
func TestContainerSwap(t *testing.T) {
	const gi = int64(1 << 30)
	burstable := podWith(req(resList("", "1Gi"), resList("", "2Gi")))
	guaranteed := podWith(req(resList("1", "1Gi"), resList("1", "1Gi")))
	noMemory := podWith(req(resList("100m", ""), nil))
	critical := podWith(req(resList("", "1Gi"), resList("", "2Gi")))
	critical.Spec.Priority = func(v int32) *int32 { return &v }(2000000000)
	limited := Swap{Behavior: runtime.SwapLimitedSwap, Controller: true, V2: true, MemoryCapacity: 8 * gi, SwapCapacity: 4 * gi}
	for _, tc := range []struct {
		name        string
		s           Swap
		pod         *v1.Pod
		limit       int64
		wantSwap    int64
		wantUnified string // "" for none
	}{
		{"v2 LimitedSwap burstable", limited, burstable, 2 * gi, 0, "536870912"},
		{"v2 LimitedSwap guaranteed", limited, guaranteed, gi, 0, "0"},
		{"v2 LimitedSwap no memory request", limited, noMemory, 0, 0, "0"},
		{"v2 LimitedSwap critical", limited, critical, 2 * gi, 0, "0"},
		{"v2 NoSwap", Swap{Controller: true, V2: true}, burstable, 2 * gi, 0, "0"},
		{"v1 NoSwap: no swap beyond the limit", Swap{Controller: true}, burstable, 2 * gi, 2 * gi, ""},
		{"v1 LimitedSwap acts as NoSwap", Swap{Behavior: runtime.SwapLimitedSwap, Controller: true}, burstable, 2 * gi, 2 * gi, ""},
		{"no swap controller", Swap{V2: true}, burstable, 2 * gi, 0, ""},
	} {
		swap, unified := tc.s.container(tc.pod, &tc.pod.Spec.Containers[0], tc.limit)
		if swap != tc.wantSwap || unified["memory.swap.max"] != tc.wantUnified || (tc.wantUnified == "" && unified != nil) {
			t.Errorf("%s: swap %d unified %v; want %d %q", tc.name, swap, unified, tc.wantSwap, tc.wantUnified)
		}
	}
}

package main

import (
	"fmt"

	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
)

// cgroupFlags are the kubelet's cgroup settings.
type cgroupFlags struct {
	cgroupDriver  string
	cgroupRoot    string
	cgroupsPerQOS bool
	failSwapOn    bool
	swapBehavior  string
}

func (c *cgroupFlags) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.cgroupDriver, "cgroup-driver", "", "cgroupfs or systemd; empty: what containerd's CRI plugin says (as the kubelet asks it), else systemd on a cgroup v2 host booted with systemd, else cgroupfs")
	fs.StringVar(&c.cgroupRoot, "cgroup-root", "/", "cgroup (cgroupfs form) the kubepods hierarchy goes below")
	fs.BoolVar(&c.cgroupsPerQOS, "cgroups-per-qos", true, "make the kubepods, QoS and pod cgroups; false: containers go straight below --cgroup-root")
	fs.BoolVar(&c.failSwapOn, "fail-swap-on", true, "refuse to start while the host has swap on")
	fs.StringVar(&c.swapBehavior, "memory-swap-behavior", "", "the kubelet's memorySwap.swapBehavior: NoSwap (the default: containers never swap) or LimitedSwap (Burstable pods' containers get their memory request's share of the swap; cgroup v2 only)")
}

func (c *cgroupFlags) cgroupConfig() (runtime.CgroupConfig, error) {
	switch c.swapBehavior {
	case "", runtime.SwapNoSwap, runtime.SwapLimitedSwap:
	default:
		return runtime.CgroupConfig{}, fmt.Errorf("--memory-swap-behavior %q: NoSwap or LimitedSwap", c.swapBehavior)
	}
	switch c.cgroupDriver {
	case "", runtime.CgroupDriverCgroupfs, runtime.CgroupDriverSystemd:
	default:
		return runtime.CgroupConfig{}, fmt.Errorf("--cgroup-driver %q: cgroupfs or systemd", c.cgroupDriver)
	}
	return runtime.CgroupConfig{Driver: c.cgroupDriver, Root: c.cgroupRoot, PerQOS: c.cgroupsPerQOS}, nil
}

// setupCgroups makes kubepods and the QoS cgroups, kubepods limited to the
// capacity less the reserved resources, as the kubelet enforces node
// allocatable on "pods" (its default): eviction thresholds are not taken
// off, so eviction acts before the kernel's OOM killer.
func setupCgroups(cg *runtime.Cgroups, capacity, reserved v1.ResourceList) error {
	cpu, mem := capacity.Cpu().DeepCopy(), capacity.Memory().DeepCopy()
	if r, ok := reserved[v1.ResourceCPU]; ok {
		cpu.Sub(r)
	}
	if r, ok := reserved[v1.ResourceMemory]; ok {
		mem.Sub(r)
	}
	return cg.Setup(max(cpu.MilliValue(), 0), max(mem.Value(), 0))
}

// swap checks the host's swap as the kubelet does at start and says what
// containers get: with swap on, hostlet starts only with --fail-swap-on
// false; LimitedSwap needs cgroup v2.
func (c *cgroupFlags) swap(v2 bool, memoryCapacity int64) (podspec.Swap, error) {
	on, err := runtime.SwapOn("/proc/swaps")
	if err != nil {
		return podspec.Swap{}, fmt.Errorf("failed to determine if swap is on: %w", err)
	}
	if on && c.failSwapOn {
		return podspec.Swap{}, fmt.Errorf("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false")
	}
	if !v2 && c.swapBehavior == runtime.SwapLimitedSwap {
		return podspec.Swap{}, fmt.Errorf("swap feature is enabled and LimitedSwap but it is only supported with cgroupv2")
	}
	if !c.failSwapOn && c.swapBehavior == "" {
		log.Info("NoSwap is set due to memorySwapBehavior not specified")
	}
	return podspec.Swap{
		Behavior: c.swapBehavior, V2: v2, Controller: runtime.SwapControllerAvailable("/sys/fs/cgroup", v2),
		MemoryCapacity: memoryCapacity, SwapCapacity: runtime.SwapCapacity("/proc/meminfo"),
	}, nil
}

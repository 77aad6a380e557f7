package main

import (
	"fmt"

	"github.com/hostlet/hostlet/runtime"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
)

// cgroupFlags are the kubelet's cgroup settings.
type cgroupFlags struct {
	cgroupDriver  string
	cgroupRoot    string
	cgroupsPerQOS bool
}

func (c *cgroupFlags) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.cgroupDriver, "cgroup-driver", "", "cgroupfs or systemd; empty: what containerd's CRI plugin says (as the kubelet asks it), else systemd on a cgroup v2 host booted with systemd, else cgroupfs")
	fs.StringVar(&c.cgroupRoot, "cgroup-root", "/", "cgroup (cgroupfs form) the kubepods hierarchy goes below")
	fs.BoolVar(&c.cgroupsPerQOS, "cgroups-per-qos", true, "make the kubepods, QoS and pod cgroups; false: containers go straight below --cgroup-root")
}

func (c *cgroupFlags) cgroupConfig() (runtime.CgroupConfig, error) {
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

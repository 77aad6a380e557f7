package main

import (
	"fmt"

	"github.com/hostlet/hostlet/kubeletconfig"
	"github.com/hostlet/hostlet/provider/nodecontainers"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
)

// cgroupFlags are the kubelet's cgroup settings.
type cgroupFlags struct {
	cgroupDriver  string
	cgroupRoot    string
	cgroupsPerQOS bool
	failSwapOn    bool
	swapBehavior  string
	// The kubelet's node allocatable enforcement and system containers.
	enforceNodeAllocatable []string
	systemReservedCgroup   string
	kubeReservedCgroup     string
	kubeletCgroups         string
	systemCgroups          string
	systemCgroupsFrom      string
	runtimeCgroups         string
	// qosReserved is the kubelet's --qos-reserved (memory=<percent>%).
	qosReserved map[string]string
}

func (c *cgroupFlags) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.cgroupDriver, "cgroup-driver", "", "cgroupfs or systemd, unless containerd's CRI plugin says its driver, which wins (as the kubelet 1.35 takes it); empty and no CRI answer: systemd on a cgroup v2 host booted with systemd, else cgroupfs")
	fs.StringVar(&c.cgroupRoot, "cgroup-root", "/", "cgroup (cgroupfs form) the kubepods hierarchy goes below")
	fs.BoolVar(&c.cgroupsPerQOS, "cgroups-per-qos", true, "make the kubepods, QoS and pod cgroups; false: containers go straight below --cgroup-root")
	fs.BoolVar(&c.failSwapOn, "fail-swap-on", true, "refuse to start while the host has swap on")
	fs.StringSliceVar(&c.enforceNodeAllocatable, "enforce-node-allocatable", []string{nodecontainers.EnforcePods}, "where node allocatable is enforced: pods (kubepods limited to the capacity less the reservations), system-reserved and kube-reserved (their cgroups limited to the reservation), their -compressible forms (CPU only), or none")
	fs.StringVar(&c.systemReservedCgroup, "system-reserved-cgroup", "", "existing cgroup (the driver's form) --system-reserved is enforced on with --enforce-node-allocatable system-reserved")
	fs.StringVar(&c.kubeReservedCgroup, "kube-reserved-cgroup", "", "existing cgroup (the driver's form) --kube-reserved is enforced on with --enforce-node-allocatable kube-reserved")
	fs.StringVar(&c.kubeletCgroups, "kubelet-cgroups", "", "cgroup (a cgroupfs path) hostlet moves itself into, at start and every minute; empty: where its unit put it")
	fs.StringVar(&c.systemCgroups, "system-cgroups", "", "cgroup (a cgroupfs path, not /; needs --cgroup-root) the processes of the root cgroup (but PID 1 and kernel threads) are moved into, at start and every minute")
	// Tests only: the cgroup --system-cgroups takes processes from, in
	// place of the host's root (whose processes are not a test's).
	fs.StringVar(&c.systemCgroupsFrom, "test-system-cgroups-from", "/", "")
	_ = fs.MarkHidden("test-system-cgroups-from")
	fs.StringVar(&c.runtimeCgroups, "runtime-cgroups", "", "cgroup (a cgroupfs path) the container runtime runs in, reported as the \"runtime\" system container of /stats/summary (as the kubelet 1.35, nothing is moved into it)")
	fs.StringToStringVar(&c.qosReserved, "qos-reserved", nil, "<Warning: Alpha feature> A set of ResourceName=Percentage (e.g. memory=50%) pairs that describe how pod resource requests are reserved at the QoS level. Currently only memory is supported. Requires the QOSReserved feature gate to be enabled.")
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

// newNodeContainers is the kubelet's node container manager over the
// runtime's cgroups: what kubepods and the reserved cgroups are limited
// to, and the system containers.
func (c *cgroupFlags) newNodeContainers(name string, systemReserved, kubeReserved v1.ResourceList, events record.EventRecorder, cg *runtime.Cgroups) (*nodecontainers.Manager, error) {
	return nodecontainers.New(nodecontainers.Config{
		NodeName: name, Enforce: c.enforceNodeAllocatable, PerQOS: c.cgroupsPerQOS,
		SystemReserved: systemReserved, KubeReserved: kubeReserved,
		SystemReservedCgroup: c.systemReservedCgroup, KubeReservedCgroup: c.kubeReservedCgroup,
		KubeletCgroups: c.kubeletCgroups, SystemCgroups: c.systemCgroups, SystemCgroupsFrom: c.systemCgroupsFrom,
		RuntimeCgroups: c.runtimeCgroups, Events: events,
	}, cg)
}

// qosReserve is qosReserved's QoS memory limits, nil unless it reserves
// memory under the QOSReserved gate and the QoS cgroups are made: the
// allocatable the limits come from is the capacity less both
// reservations, as the kubelet's GetNodeAllocatableAbsolute (no eviction
// threshold).
func (o *options) qosReserve(capacity, systemReserved, kubeReserved v1.ResourceList, cg *runtime.Cgroups) *nodecontainers.QOSReserve {
	if !o.cgroupsPerQOS || !o.gates.Enabled("QOSReserved") {
		return nil
	}
	// Parsed at start already (checkQOSReserved).
	reserved, err := kubeletconfig.ParseQOSReserved(o.qosReserved)
	if err != nil {
		return nil
	}
	percent, ok := reserved[v1.ResourceMemory]
	if !ok {
		return nil
	}
	allocatable := capacity.Memory().DeepCopy()
	allocatable.Sub(systemReserved[v1.ResourceMemory])
	allocatable.Sub(kubeReserved[v1.ResourceMemory])
	if allocatable.Sign() < 0 {
		allocatable.Set(0)
	}
	return &nodecontainers.QOSReserve{Percent: percent, Allocatable: allocatable.Value(), Cgroups: cg}
}

// reservations are --system-reserved and --kube-reserved apart: each
// reserved cgroup is limited to its own.
func (o *options) reservations() (system, kube v1.ResourceList, err error) {
	if system, err = parseResources(o.systemReserved); err != nil {
		return nil, nil, err
	}
	if kube, err = parseResources(o.kubeReserved); err != nil {
		return nil, nil, err
	}
	return system, kube, nil
}

// enforceNodeAllocatable limits kubepods and the reserved cgroups from the
// node's capacity and task limit.
func enforceNodeAllocatable(m *nodecontainers.Manager, capacity v1.ResourceList) error {
	capacity = capacity.DeepCopy()
	if pids := runtime.MaxPIDs("/proc/sys"); pids > 0 {
		capacity[nodecontainers.ResourcePID] = *resource.NewQuantity(pids, resource.DecimalSI)
	}
	return m.Enforce(capacity)
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

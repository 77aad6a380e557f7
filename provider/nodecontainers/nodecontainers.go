// Package nodecontainers is the kubelet's node container manager: node
// allocatable enforced on kubepods and, where enforceNodeAllocatable says
// so, on the cgroups of kubeReserved and systemReserved (which must
// exist: their owner makes them); and the kubelet's system containers,
// hostlet itself moved into kubeletCgroups and the host's processes into
// systemCgroups, every minute as the kubelet keeps them there.
package nodecontainers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// The enforceNodeAllocatable values, as the kubelet's.
const (
	EnforcePods                       = "pods"
	EnforceSystemReserved             = "system-reserved"
	EnforceKubeReserved               = "kube-reserved"
	EnforceSystemReservedCompressible = "system-reserved-compressible"
	EnforceKubeReservedCompressible   = "kube-reserved-compressible"
)

// ResourcePID is the reservable process IDs' name (the kubelet's
// pidlimit.PIDs): in kubeReserved and systemReserved, never in the Node's
// capacity.
const ResourcePID v1.ResourceName = "pid"

// EnsurePeriod is how often the system containers are put right again,
// as the kubelet's container manager does.
const EnsurePeriod = time.Minute

// Config is the node's allocatable enforcement and system containers.
type Config struct {
	NodeName string
	// Enforce is enforceNodeAllocatable (validated already).
	Enforce []string
	PerQOS  bool
	// SystemReserved and KubeReserved are the reservations, "pid"
	// included.
	SystemReserved, KubeReserved v1.ResourceList
	// SystemReservedCgroup and KubeReservedCgroup name existing cgroups in
	// the driver's form.
	SystemReservedCgroup, KubeReservedCgroup string
	// KubeletCgroups and SystemCgroups are cgroupfs paths ("" none).
	KubeletCgroups, SystemCgroups string
	// RuntimeCgroups is the kubelet's --runtime-cgroups: the cgroup the
	// container runtime runs in ("" none), named for the stats summary's
	// "runtime" system container only (the kubelet 1.35 moves nothing
	// into it).
	RuntimeCgroups string
	// SystemCgroupsFrom is the cgroup whose processes go into
	// SystemCgroups: the root, "/", as the kubelet's (tests give one of
	// their own).
	SystemCgroupsFrom string
	Events            record.EventRecorder
}

// Cgroups is what the manager writes with (*runtime.Cgroups).
type Cgroups interface {
	Setup(milliCPU, memory, pids int64) error
	ParseDriverName(s string) runtime.CgroupName
	UpdateExisting(n runtime.CgroupName, res runtime.PodResources) error
	MoveProcess(name string, pid int) error
	CgroupPids(name string) ([]int, error)
	PodsCgroupName() string
}

// Manager enforces Config on Cgroups.
type Manager struct {
	cfg Config
	cg  Cgroups
	// pid is the process moved into KubeletCgroups (hostlet's own).
	pid int
	// inHost says whether pid is in the host's PID namespace: the kubelet
	// leaves a process in a container where it is.
	inHost func(pid int) (bool, error)
	// kernel says whether a process is a kernel thread, left in the root.
	kernel func(pid int) bool
	// cgroupOf is a process's cgroup (runtime.ProcessCgroup).
	cgroupOf func(pid int) (string, error)
}

// New validates cfg as the kubelet's container manager does at start.
func New(cfg Config, cg Cgroups) (*Manager, error) {
	if cfg.SystemCgroups == "/" {
		return nil, errors.New(`system container cannot be root ("/")`)
	}
	if cfg.SystemCgroupsFrom == "" {
		cfg.SystemCgroupsFrom = "/"
	}
	return &Manager{cfg: cfg, cg: cg, pid: os.Getpid(), inHost: inHostPIDNamespace, kernel: kernelThread,
		cgroupOf: func(pid int) (string, error) { return runtime.ProcessCgroup(pid, runtime.CgroupV2()) }}, nil
}

// Allocatable is what kubepods is limited to, as the kubelet's
// enforceNodeAllocatableCgroups: capacity (the node's CPU and memory and
// its task limit as "pid"), less both reservations when "pods" is
// enforced, never below zero.
func (m *Manager) Allocatable(capacity v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	enforce := m.cfg.PerQOS && slices.Contains(m.cfg.Enforce, EnforcePods)
	for k, v := range capacity {
		v = v.DeepCopy()
		if enforce {
			if r, ok := m.cfg.SystemReserved[k]; ok {
				v.Sub(r)
			}
			if r, ok := m.cfg.KubeReserved[k]; ok {
				v.Sub(r)
			}
			if v.Sign() < 0 {
				v = *resource.NewQuantity(0, v.Format)
			}
		}
		out[k] = v
	}
	return out
}

// Enforce writes kubepods' limits and those of the reserved cgroups
// enforceNodeAllocatable names, with the kubelet's events; a reserved
// cgroup that does not exist is the kubelet's error, which stops it.
func (m *Manager) Enforce(capacity v1.ResourceList) error {
	a := m.Allocatable(capacity)
	pids := a[ResourcePID]
	if err := m.cg.Setup(a.Cpu().MilliValue(), a.Memory().Value(), pids.Value()); err != nil {
		return err
	}
	if m.cfg.PerQOS {
		m.event(v1.EventTypeNormal, "Updated Node Allocatable limit across pods")
	}
	for _, e := range []struct {
		key, what, short string
		cgroup           string
		reserved         v1.ResourceList
		compressible     bool
	}{
		{EnforceSystemReserved, "System Reserved", "system reserved", m.cfg.SystemReservedCgroup, m.cfg.SystemReserved, false},
		{EnforceKubeReserved, "Kube Reserved", "kube reserved", m.cfg.KubeReservedCgroup, m.cfg.KubeReserved, false},
		{EnforceSystemReservedCompressible, "System Reserved Compressible", "system reserved", m.cfg.SystemReservedCgroup, m.cfg.SystemReserved, true},
		{EnforceKubeReservedCompressible, "Kube Reserved Compressible", "kube reserved", m.cfg.KubeReservedCgroup, m.cfg.KubeReserved, true},
	} {
		if !slices.Contains(m.cfg.Enforce, e.key) {
			continue
		}
		log.WithFields(log.Fields{"cgroup": e.cgroup, "limits": e.reserved}).Infof("enforcing %s on its cgroup", e.short)
		if err := m.cg.UpdateExisting(m.cg.ParseDriverName(e.cgroup), ReservedResources(e.reserved, e.compressible)); err != nil {
			msg := fmt.Sprintf("Failed to enforce %s Cgroup Limits on %q: %v", e.what, e.cgroup, err)
			m.event(v1.EventTypeWarning, msg)
			return errors.New(msg)
		}
		m.event(v1.EventTypeNormal, fmt.Sprintf("Updated limits on %s cgroup %v", e.short, e.cgroup))
	}
	return nil
}

// ReservedResources is a reservation as the kubelet's getCgroupConfig
// writes it on its cgroup: memory as the limit, CPU as shares, "pid" as
// the pids limit; compressible, CPU alone.
func ReservedResources(rl v1.ResourceList, compressible bool) runtime.PodResources {
	var res runtime.PodResources
	if q, ok := rl[v1.ResourceCPU]; ok {
		res.CPUShares = ptrTo(runtime.MilliCPUToShares(q.MilliValue()))
	}
	if compressible {
		return res
	}
	if q, ok := rl[v1.ResourceMemory]; ok {
		res.Memory = ptrTo(q.Value())
	}
	if q, ok := rl[ResourcePID]; ok {
		res.PidsLimit = ptrTo(q.Value())
	}
	return res
}

func (m *Manager) event(kind, msg string) {
	reason := "SuccessfulNodeAllocatableEnforcement"
	if kind == v1.EventTypeWarning {
		reason = "FailedNodeAllocatableEnforcement"
	}
	if m.cfg.Events != nil {
		m.cfg.Events.Event(&v1.ObjectReference{Kind: "Node", Name: m.cfg.NodeName, UID: types.UID(m.cfg.NodeName)}, kind, reason, msg)
	}
}

// Run keeps the system containers until ctx ends: at once, then every
// EnsurePeriod, as the kubelet's container manager; a failure is logged
// and tried again next time, as the kubelet's.
func (m *Manager) Run(ctx context.Context) {
	if m.cfg.KubeletCgroups == "" && m.cfg.SystemCgroups == "" {
		return
	}
	t := time.NewTicker(EnsurePeriod)
	defer t.Stop()
	for {
		for _, err := range m.EnsureSystemContainers() {
			log.WithError(err).Info("failed to ensure state of a system container")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// EnsureSystemContainers moves the host's processes into SystemCgroups
// and hostlet into KubeletCgroups, as the kubelet's ensureSystemCgroups
// and ensureProcessInContainerWithOOMScore.
func (m *Manager) EnsureSystemContainers() []error {
	var errs []error
	if m.cfg.SystemCgroups != "" {
		if err := m.ensureSystem(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.cfg.SystemCgroups, err))
		}
	}
	if m.cfg.KubeletCgroups != "" {
		if err := m.ensureKubelet(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.cfg.KubeletCgroups, err))
		}
	}
	return errs
}

// ensureSystem moves every process of the root but PID 1 and the kernel's
// threads (whose work must not be tied to the system's quota) into
// SystemCgroups, trying again while some remain (processes fork while
// they are moved), the last try's error kept.
func (m *Manager) ensureSystem() error {
	var last error
	for range 11 {
		all, err := m.cg.CgroupPids(m.cfg.SystemCgroupsFrom)
		if err != nil {
			last = fmt.Errorf("failed to list PIDs for root: %w", err)
			continue
		}
		var pids []int
		for _, pid := range all {
			if pid != 1 && !m.kernel(pid) {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		log.WithField("pids", pids).Debug("moving non-kernel processes into the system container")
		for _, pid := range pids {
			if err := m.cg.MoveProcess(m.cfg.SystemCgroups, pid); err != nil {
				last = fmt.Errorf("failed to move PID %d into the system container %q: %w", pid, m.cfg.SystemCgroups, err)
			}
		}
	}
	return last
}

// ensureKubelet moves hostlet into KubeletCgroups unless it runs in a
// container (another PID namespace), which the kubelet leaves alone.
func (m *Manager) ensureKubelet() error {
	in, err := m.inHost(m.pid)
	if err != nil {
		return err
	}
	if !in {
		log.WithField("pid", m.pid).Debug("hostlet is not in the host's PID namespace: kubeletCgroups left alone")
		return nil
	}
	return m.cg.MoveProcess(m.cfg.KubeletCgroups, m.pid)
}

// SystemContainers are the kubelet's stats summary system containers and
// their cgroups (paths from the hierarchies' root): "kubelet" its
// kubeletCgroups or, without, the cgroup hostlet is in (as the kubelet
// finds its own; none where that cannot be told), "misc" systemCgroups,
// "pods" the pods' cgroup, "runtime" the kubelet's --runtime-cgroups.
func (m *Manager) SystemContainers() map[string]string {
	out := map[string]string{"pods": m.cg.PodsCgroupName()}
	if m.cfg.KubeletCgroups != "" {
		out["kubelet"] = m.cfg.KubeletCgroups
	} else if cur, err := m.cgroupOf(m.pid); err == nil {
		out["kubelet"] = cur
	} else {
		log.WithError(err).Debug("failed to find cgroups of hostlet: no kubelet system container in the stats summary")
	}
	if m.cfg.SystemCgroups != "" {
		out["misc"] = m.cfg.SystemCgroups
	}
	if m.cfg.RuntimeCgroups != "" {
		out["runtime"] = m.cfg.RuntimeCgroups
	}
	return out
}

// inHostPIDNamespace says whether pid shares PID 1's PID namespace.
func inHostPIDNamespace(pid int) (bool, error) {
	init, err := os.Readlink("/proc/1/ns/pid")
	if err != nil {
		return false, fmt.Errorf("failed to find pid namespace of init process: %w", err)
	}
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return false, fmt.Errorf("failed to find pid namespace of process %d: %w", pid, err)
	}
	return init == own, nil
}

// kernelThread says whether pid is a kernel thread: it has no executable.
func kernelThread(pid int) bool {
	_, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return errors.Is(err, os.ErrNotExist)
}

func ptrTo[T any](v T) *T { return &v }

package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// Cgroup drivers, as the kubelet's --cgroup-driver.
const (
	CgroupDriverCgroupfs = "cgroupfs"
	CgroupDriverSystemd  = "systemd"
)

// QoS classes, as the kubelet names them (v1.PodQOSClass).
const (
	QOSGuaranteed = "Guaranteed"
	QOSBurstable  = "Burstable"
	QOSBestEffort = "BestEffort"
)

// The kubelet's CPU constants (pkg/kubelet/cm/helpers_linux.go).
const (
	MinShares     = 2
	MaxShares     = 262144
	SharesPerCPU  = 1024
	MilliCPUToCPU = 1000
	// QuotaPeriod is the CFS period in microseconds (100ms).
	QuotaPeriod = 100000
	// MinQuotaPeriod is the smallest quota the kernel takes (1ms).
	MinQuotaPeriod = 1000
)

// CgroupConfig is the kubelet's cgroup settings.
type CgroupConfig struct {
	// Driver is CgroupDriverCgroupfs or CgroupDriverSystemd; empty: ask
	// containerd, else detect (DetectCgroupDriver).
	Driver string
	// Root is --cgroup-root in cgroupfs form; empty is "/".
	Root string
	// PerQOS is --cgroups-per-qos: the kubepods, QoS and pod cgroups.
	PerQOS bool
}

// PodResources are a pod (or QoS) cgroup's settings, as the kubelet's
// ResourceConfig: nil leaves a setting as it is.
type PodResources struct {
	CPUShares *uint64
	CPUQuota  *int64
	CPUPeriod *uint64
	Memory    *int64
	PidsLimit *int64
	// Unified files are written as given on cgroup v2 only (memory.min,
	// memory.swap.max...).
	Unified map[string]string
}

// Cgroups places pods as the kubelet's container manager does: kubepods,
// its burstable and besteffort QoS cgroups, one cgroup per pod, named for
// the cgroupfs or systemd driver; opencontainers/cgroups (the kubelet's
// library) does the writing, for cgroup v1 and v2 alike.
type Cgroups struct {
	systemd bool
	v2      bool
	perQOS  bool
	// pods is kubepods below the root, or the root itself without
	// --cgroups-per-qos (then no pod cgroups are made).
	pods CgroupName
	// qosMu serializes the writers of kubepods and the QoS cgroups (Setup,
	// UpdateQOS), as the kubelet's QoS container manager's lock. Pod
	// cgroups are made without it, side by side, as the kubelet's pod
	// container manager makes them: a pod's worker updates the QoS cgroups
	// before it makes its pod's cgroup. Under one lock with the QoS
	// updates, a burst's sandboxes waited about a second each for it.
	qosMu sync.Mutex
	// mounts lists the hierarchies' mount points (cgroupMounts; tests
	// stand temp dirs in).
	mounts func() ([]string, error)
	// stopUnit stops a systemd unit and waits for it (stopSystemdUnit;
	// tests stand in).
	stopUnit func(ctx context.Context, name string) error
	// v1Mounts are the v1 controllers' mount points by controller, read
	// once (subsystemMounts).
	v1Once   sync.Once
	v1Mounts map[string]string
	v1Err    error
}

// NewCgroups names the hierarchy; driver must be resolved already.
func NewCgroups(cfg CgroupConfig, v2 bool) (*Cgroups, error) {
	if cfg.Driver != CgroupDriverCgroupfs && cfg.Driver != CgroupDriverSystemd {
		return nil, fmt.Errorf("unknown cgroup driver %q (cgroupfs or systemd)", cfg.Driver)
	}
	root := ParseCgroupfsName(cfg.Root)
	for _, c := range root {
		if strings.Contains(c, "_") {
			return nil, fmt.Errorf("--cgroup-root %q: no \"_\" allowed in its components", cfg.Root)
		}
	}
	c := &Cgroups{systemd: cfg.Driver == CgroupDriverSystemd, v2: v2, perQOS: cfg.PerQOS, pods: root,
		mounts: func() ([]string, error) { return cgroupMounts(v2) }, stopUnit: stopSystemdUnit}
	if cfg.PerQOS {
		c.pods = root.Child("kubepods")
	}
	return c, nil
}

// Driver is the cgroup driver in use.
func (c *Cgroups) Driver() string {
	if c.systemd {
		return CgroupDriverSystemd
	}
	return CgroupDriverCgroupfs
}

// V2 reports whether the host has the unified hierarchy.
func (c *Cgroups) V2() bool { return c.v2 }

// name is n in the driver's form (always a cgroupfs-like path).
func (c *Cgroups) name(n CgroupName) string {
	if c.systemd {
		return n.ToSystemd()
	}
	return n.ToCgroupfs()
}

// qosName is the parent of a QoS class's pods: Guaranteed pods sit
// directly in kubepods.
func (c *Cgroups) qosName(qos string) CgroupName {
	if !c.perQOS {
		return c.pods
	}
	switch qos {
	case QOSBurstable:
		return c.pods.Child("burstable")
	case QOSBestEffort:
		return c.pods.Child("besteffort")
	}
	return c.pods
}

func (c *Cgroups) podName(uid, qos string) (CgroupName, error) {
	if uid == "" || strings.ContainsAny(uid, "/_") {
		return nil, fmt.Errorf("pod UID %q cannot name a cgroup", uid)
	}
	return c.qosName(qos).Child("pod" + uid), nil
}

// PodCgroupParent is the cgroup the pod's containers go below, in the
// driver's form, as the kubelet hands it to CRI: the pod's cgroup, or the
// root without --cgroups-per-qos (systemd's root slice is "-.slice").
func (c *Cgroups) PodCgroupParent(uid, qos string) (string, error) {
	if !c.perQOS {
		if p := c.name(c.pods); !(c.systemd && p == "/") {
			return p, nil
		}
		return "-.slice", nil
	}
	n, err := c.podName(uid, qos)
	if err != nil {
		return "", err
	}
	return c.name(n), nil
}

// libctConfig is the library's description of cgroup n, as the kubelet's
// cgroupCommon.libctCgroupConfig: a path for cgroupfs, parent slice and
// name for systemd.
func (c *Cgroups) libctConfig(n CgroupName, res *PodResources) *cgroups.Cgroup {
	cfg := &cgroups.Cgroup{Systemd: c.systemd, Resources: c.toResources(res)}
	if !c.systemd {
		cfg.Path = n.ToCgroupfs()
		return cfg
	}
	dir, base := path.Split(n.ToSystemd())
	if dir == "/" {
		dir = "-.slice"
	} else {
		dir = path.Base(dir)
	}
	cfg.Parent, cfg.Name = dir, base
	return cfg
}

// toResources is the kubelet's cgroupCommon.toResources: on cgroup v2 CPU
// shares become cpu.weight by the kubelet's linear map (not runc's).
func (c *Cgroups) toResources(res *PodResources) *cgroups.Resources {
	out := &cgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true}
	if res == nil {
		return out
	}
	if res.Memory != nil {
		out.Memory = *res.Memory
	}
	if res.CPUShares != nil {
		if c.v2 {
			out.CpuWeight = CPUWeight(*res.CPUShares)
		} else {
			out.CpuShares = *res.CPUShares
		}
	}
	if res.CPUQuota != nil {
		out.CpuQuota = *res.CPUQuota
	}
	if res.CPUPeriod != nil {
		out.CpuPeriod = *res.CPUPeriod
	}
	if res.PidsLimit != nil {
		out.PidsLimit = *res.PidsLimit
	}
	if res.Unified != nil && c.v2 {
		out.Unified = make(map[string]string, len(res.Unified))
		for k, v := range res.Unified {
			out.Unified[k] = v
		}
	}
	return out
}

// CPUWeight is the kubelet's getCPUWeight: shares [2, 262144] onto
// cpu.weight [1, 10000].
func CPUWeight(shares uint64) uint64 {
	if shares >= MaxShares {
		return 10000
	}
	if shares < MinShares {
		shares = MinShares
	}
	return 1 + ((shares-2)*9999)/262142
}

// MilliCPUToShares is the kubelet's conversion of a CPU request.
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU == 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / MilliCPUToCPU
	switch {
	case shares < MinShares:
		return MinShares
	case shares > MaxShares:
		return MaxShares
	}
	return uint64(shares)
}

// MilliCPUToQuota is the kubelet's conversion of a CPU limit to a CFS
// quota over period (both microseconds).
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*period/MilliCPUToCPU, MinQuotaPeriod)
}

func (c *Cgroups) manager(n CgroupName, res *PodResources) (cgroups.Manager, *cgroups.Cgroup, error) {
	cfg := c.libctConfig(n, res)
	m, err := manager.New(cfg)
	return m, cfg, err
}

// create makes cgroup n with res, as the kubelet's Create: Apply(-1)
// makes the directories (or the slice), Set writes the limits.
func (c *Cgroups) create(n CgroupName, res *PodResources) error {
	m, cfg, err := c.manager(n, res)
	if err != nil {
		return err
	}
	if err := m.Apply(-1); err != nil {
		return fmt.Errorf("creating cgroup %s: %w", c.name(n), err)
	}
	if err := m.Set(cfg.Resources); err != nil {
		return fmt.Errorf("setting cgroup %s: %w", c.name(n), err)
	}
	return nil
}

func (c *Cgroups) update(n CgroupName, res *PodResources) error {
	m, cfg, err := c.manager(n, res)
	if err != nil {
		return err
	}
	if err := m.Set(cfg.Resources); err != nil {
		return fmt.Errorf("updating cgroup %s: %w", c.name(n), err)
	}
	return nil
}

func (c *Cgroups) exists(n CgroupName) bool {
	m, _, err := c.manager(n, nil)
	return err == nil && m.Exists()
}

// Setup makes kubepods (limited to the node's allocatable CPU, memory and
// process IDs, as the kubelet's node allocatable cgroup; 0 leaves one
// unlimited) and the burstable and besteffort QoS cgroups, or refreshes
// their settings.
func (c *Cgroups) Setup(allocatableMilliCPU, allocatableMemory, allocatablePIDs int64) error {
	if !c.perQOS {
		return nil
	}
	c.qosMu.Lock()
	defer c.qosMu.Unlock()
	pods := &PodResources{}
	if allocatableMilliCPU > 0 {
		pods.CPUShares = ptr.To(MilliCPUToShares(allocatableMilliCPU))
	}
	if allocatableMemory > 0 {
		pods.Memory = &allocatableMemory
	}
	if allocatablePIDs > 0 {
		pods.PidsLimit = &allocatablePIDs
	}
	if err := c.ensure(c.pods, pods); err != nil {
		return err
	}
	if err := c.ensure(c.qosName(QOSBurstable), &PodResources{}); err != nil {
		return err
	}
	return c.ensure(c.qosName(QOSBestEffort), &PodResources{CPUShares: ptr.To(uint64(MinShares))})
}

// ensure creates n, or sets res on it when it exists (the kubelet's
// startup "update the config to ensure we have the right state").
func (c *Cgroups) ensure(n CgroupName, res *PodResources) error {
	if c.exists(n) {
		return c.update(n, res)
	}
	return c.create(n, res)
}

// UpdateQOS sets the burstable QoS cgroup's CPU shares to the sum of its
// pods' requests and keeps besteffort at the minimum, as the kubelet's
// qosContainerManager.UpdateCgroups.
func (c *Cgroups) UpdateQOS(burstableMilliCPU int64) error {
	if !c.perQOS {
		return nil
	}
	c.qosMu.Lock()
	defer c.qosMu.Unlock()
	if err := c.update(c.qosName(QOSBurstable), &PodResources{CPUShares: ptr.To(MilliCPUToShares(burstableMilliCPU))}); err != nil {
		return err
	}
	return c.update(c.qosName(QOSBestEffort), &PodResources{CPUShares: ptr.To(uint64(MinShares))})
}

// UpdateQOSMemory sets the memory limits of the burstable and besteffort
// QoS cgroups (qosReserved), as the kubelet's QoS container manager's
// UpdateCgroups with the QOSReserved gate: both written; if either write
// failed (cgroup v1 refuses a limit below the usage), each cgroup already
// using more than its new limit is given its usage as the limit instead,
// so it may not grow, and both are written again.
func (c *Cgroups) UpdateQOSMemory(burstable, bestEffort int64) error {
	if !c.perQOS {
		return nil
	}
	c.qosMu.Lock()
	defer c.qosMu.Unlock()
	limits := map[string]int64{QOSBurstable: burstable, QOSBestEffort: bestEffort}
	write := func() error {
		var errs []error
		for _, qos := range []string{QOSBurstable, QOSBestEffort} {
			limit := limits[qos]
			errs = append(errs, c.update(c.qosName(qos), &PodResources{Memory: &limit}))
		}
		return errors.Join(errs...)
	}
	if write() == nil {
		return nil
	}
	for _, qos := range []string{QOSBurstable, QOSBestEffort} {
		m, _, err := c.manager(c.qosName(qos), nil)
		if err != nil {
			return err
		}
		st, err := m.GetStats()
		if err != nil {
			return fmt.Errorf("reading the memory usage of %s: %w", c.name(c.qosName(qos)), err)
		}
		if usage := int64(st.MemoryStats.Usage.Usage); usage > limits[qos] {
			limits[qos] = usage
		}
	}
	return write()
}

// EnsurePod creates the pod's cgroup with res unless it exists (the
// kubelet's podContainerManager.EnsureExists), and returns the parent
// of its containers.
func (c *Cgroups) EnsurePod(uid, qos string, res PodResources) (string, error) {
	parent, err := c.PodCgroupParent(uid, qos)
	if err != nil || !c.perQOS {
		return parent, err
	}
	n, _ := c.podName(uid, qos)
	if c.exists(n) {
		return parent, nil
	}
	return parent, c.create(n, &res)
}

// UpdatePod sets res on an existing pod cgroup (in-place resize).
func (c *Cgroups) UpdatePod(uid, qos string, res PodResources) error {
	if !c.perQOS {
		return nil
	}
	n, err := c.podName(uid, qos)
	if err != nil {
		return err
	}
	if !c.exists(n) {
		return fmt.Errorf("cgroup of pod %s: %w", uid, os.ErrNotExist)
	}
	return c.update(n, &res)
}

// RemovePod removes the pod's cgroup, whichever QoS class it was made
// for, as the kubelet's podContainerManager.Destroy: processes still in it
// (none, once its containers and sandbox are gone; a pod removed while
// hostlet was down may leave some) are killed first. A cgroup left in
// only some hierarchies is removed too, as the kubelet's orphan cleanup
// finds it in any one.
func (c *Cgroups) RemovePod(uid string) error {
	if !c.perQOS {
		return nil
	}
	var errs []error
	for _, qos := range []string{QOSGuaranteed, QOSBurstable, QOSBestEffort} {
		n, err := c.podName(uid, qos)
		if err != nil {
			return err
		}
		m, _, err := c.manager(n, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		exists := false
		for _, p := range m.GetPaths() {
			if cgroups.PathExists(p) {
				exists = true
			}
			// The library's GetAllPids reads one hierarchy (devices on v1).
			pids, _ := cgroups.GetAllPids(p)
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		if !exists {
			continue
		}
		var derr error
		for i := 0; i < 5; i++ {
			if derr = m.Destroy(); derr == nil {
				break
			}
			// Killed processes take a moment to leave their cgroup.
			time.Sleep(100 * time.Millisecond)
		}
		if derr != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", c.name(n), derr))
		}
	}
	return errors.Join(errs...)
}

// sandboxCgroupsPath is where a pod's own process (the PID namespace
// holder) goes: a leaf below the pod cgroup, as CRI's pause container (on
// cgroup v2 a cgroup with children cannot hold processes itself).
func (c *Cgroups) sandboxCgroupsPath(parent, uid string) string {
	return containerCgroupsPath(parent, "pause-"+uid, c.systemd)
}

// PlaceSandbox moves pid into the pod's sandbox cgroup below parent.
func (c *Cgroups) PlaceSandbox(parent, uid string, pid int) error {
	if c == nil || parent == "" {
		return nil
	}
	cfg := &cgroups.Cgroup{Systemd: c.systemd, Resources: &cgroups.Resources{SkipDevices: true}}
	p := c.sandboxCgroupsPath(parent, uid)
	if c.systemd {
		parts := strings.SplitN(p, ":", 3)
		cfg.Parent, cfg.ScopePrefix, cfg.Name = parts[0], parts[1], parts[2]
	} else {
		cfg.Path = p
	}
	m, err := manager.New(cfg)
	if err != nil {
		return err
	}
	return m.Apply(pid)
}

// CgroupMemory is a cgroup's memory as eviction reads it.
type CgroupMemory struct {
	// Usage counts page cache; WorkingSet is usage less inactive file
	// pages (cAdvisor's, the kubelet's definition); Limit is 0 when
	// unlimited.
	Usage, WorkingSet, Limit uint64
	// PressureSomeAvg10 is memory PSI "some" over 10 s in percent, where
	// the kernel has PSI (cgroup v2); HasPressure says whether it has.
	PressureSomeAvg10 float64
	HasPressure       bool
}

// PodsMemory is the memory of the cgroup all pods sit below (kubepods):
// usage_in_bytes less total_inactive_file on v1, memory.current less
// inactive_file on v2.
func (c *Cgroups) PodsMemory() (CgroupMemory, error) {
	m, _, err := c.manager(c.pods, nil)
	if err != nil {
		return CgroupMemory{}, err
	}
	st, err := m.GetStats()
	if err != nil {
		return CgroupMemory{}, err
	}
	return memoryOf(st.MemoryStats, c.v2), nil
}

func memoryOf(ms cgroups.MemoryStats, v2 bool) CgroupMemory {
	inactive := ms.Stats["total_inactive_file"]
	if v2 {
		inactive = ms.Stats["inactive_file"]
	}
	out := CgroupMemory{Usage: ms.Usage.Usage, WorkingSet: workingSet(ms.Usage.Usage, inactive)}
	// The libraries report "no limit" as the largest page-aligned value
	// (v1) or MaxUint64 (v2's "max").
	if l := ms.Usage.Limit; l > 0 && l < 1<<62 {
		out.Limit = l
	}
	if ms.PSI != nil {
		out.PressureSomeAvg10, out.HasPressure = ms.PSI.Some.Avg10, true
	}
	return out
}

// withCgroupParent puts the container below its pod's cgroup (a parent
// in the driver's form; empty: containerd's default place).
func withCgroupParent(parent string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if parent == "" {
			return nil
		}
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		s.Linux.CgroupsPath = containerCgroupsPath(parent, ctr.ID, strings.HasSuffix(parent, ".slice"))
		return nil
	}
}

// CgroupV2 reports whether the host's /sys/fs/cgroup is the unified
// hierarchy (cgroup v2), as runc and the kubelet decide it.
func CgroupV2() bool { return cgroups.IsCgroup2UnifiedMode() }

// SystemdBooted reports whether systemd is the host's init, as
// sd_booted(3) checks it: runDir/systemd/system is a directory.
func SystemdBooted(runDir string) bool {
	fi, err := os.Lstat(path.Join(runDir, "systemd", "system"))
	return err == nil && fi.IsDir()
}

// DetectCgroupDriver picks the driver when --cgroup-driver is not given.
// The kubelet asks the runtime (CRI RuntimeConfig, which containerd
// answers from its runc options' SystemdCgroup); criDriver is that answer,
// "" when containerd's CRI plugin is off. Without it hostlet alone chooses
// runc's driver: systemd where systemd is init on cgroup v2 (systemd owns
// the single hierarchy there and kubeadm defaults to it), else cgroupfs
// (containerd's and the kubelet's default; on v1 systemd does not manage
// the controllers' hierarchies for others).
func DetectCgroupDriver(criDriver string, v2, systemdBooted bool) string {
	if criDriver != "" {
		return criDriver
	}
	if v2 && systemdBooted {
		return CgroupDriverSystemd
	}
	return CgroupDriverCgroupfs
}

// ResolveCgroupDriver is the driver in use, as the kubelet 1.35's
// getCgroupDriverFromCRI decides it: containerd's CRI answer (criDriver)
// whenever it gives one, over the configured cgroupDriver (a kubeadm
// config.yaml's systemd on a containerd whose runc uses cgroupfs runs
// cgroupfs); else the configured one; else, with none configured,
// hostlet's own choice from the host (DetectCgroupDriver).
func ResolveCgroupDriver(configured, criDriver string, v2, systemdBooted bool) string {
	if criDriver != "" {
		if configured != "" && configured != criDriver {
			log.WithFields(log.Fields{"cgroupDriver": criDriver, "configured": configured}).Info("Using cgroup driver setting received from the CRI runtime")
		}
		return criDriver
	}
	if configured != "" {
		return configured
	}
	return DetectCgroupDriver("", v2, systemdBooted)
}

// criCgroupDriver asks containerd's CRI plugin for its cgroup driver, as
// the kubelet does at startup; "" when the plugin is off or silent.
func criCgroupDriver(ctx context.Context, conn grpc.ClientConnInterface) string {
	if conn == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := criapi.NewRuntimeServiceClient(conn).RuntimeConfig(ctx, &criapi.RuntimeConfigRequest{})
	if err != nil || resp.GetLinux() == nil {
		log.WithError(err).Debug("containerd's CRI plugin does not say its cgroup driver")
		return ""
	}
	switch resp.GetLinux().GetCgroupDriver() {
	case criapi.CgroupDriver_SYSTEMD:
		return CgroupDriverSystemd
	case criapi.CgroupDriver_CGROUPFS:
		return CgroupDriverCgroupfs
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }

// Cgroups is the runtime's cgroup hierarchy.
func (r *Runtime) Cgroups() *Cgroups { return r.cgroups }

// EnsurePodCgroup creates the pod's cgroup unless it exists; it returns
// the parent its containers and sandbox go below.
func (r *Runtime) EnsurePodCgroup(uid, qos string, res PodResources) (string, error) {
	return r.cgroups.EnsurePod(uid, qos, res)
}

// UpdatePodCgroup sets new limits on a pod's cgroup (in-place resize).
func (r *Runtime) UpdatePodCgroup(uid, qos string, res PodResources) error {
	return r.cgroups.UpdatePod(uid, qos, res)
}

// RemovePodCgroup removes a pod's cgroup once its containers are gone.
func (r *Runtime) RemovePodCgroup(uid string) error { return r.cgroups.RemovePod(uid) }

// UpdateQOSCgroups sets the QoS cgroups' CPU shares from the burstable
// pods' CPU requests.
func (r *Runtime) UpdateQOSCgroups(burstableMilliCPU int64) error {
	return r.cgroups.UpdateQOS(burstableMilliCPU)
}

// PodsCgroupMemory is the memory of all pods' cgroup (kubepods).
func (r *Runtime) PodsCgroupMemory() (CgroupMemory, error) { return r.cgroups.PodsMemory() }

// newCgroups resolves the driver and names the hierarchy.
func newCgroups(ctx context.Context, cfg CgroupConfig, conn grpc.ClientConnInterface) (*Cgroups, error) {
	v2 := CgroupV2()
	cfg.Driver = ResolveCgroupDriver(cfg.Driver, criCgroupDriver(ctx, conn), v2, SystemdBooted("/run"))
	c, err := NewCgroups(cfg, v2)
	if err != nil {
		return nil, err
	}
	version := "v1"
	if v2 {
		version = "v2"
	}
	log.WithFields(log.Fields{"driver": cfg.Driver, "version": version, "root": cfg.Root, "perQOS": cfg.PerQOS}).Info("cgroups")
	return c, nil
}

package server

import (
	"context"
	"encoding/json"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// NodeStats reads the node's own figures (node.Node).
type NodeStats interface {
	Stats(ctx context.Context) (*statsv1alpha1.NodeStats, error)
}

// StatsRuntime is what the summary reads of the container runtime
// (runtime.Runtime).
type StatsRuntime interface {
	ContainerStats(ctx context.Context) (map[string]runtime.ContainerStats, error)
	PodNetworkStats(uid string) ([]runtime.InterfaceStats, error)
}

// DiskUsage serves the pods' writable layers and directories as last
// measured in the background (diskusage.Cache, which the eviction manager
// reads too).
type DiskUsage interface {
	RootfsUsage(ctx context.Context, id string) (runtime.DiskUsage, error)
	DirUsage(dir string) (runtime.DiskUsage, error)
}

// Volumes finds a pod volume's directory on the host (the volume manager):
// VolumeDir for the volumes hostlet made (walked for their use), StatFSDir
// for those whose filesystem says its use (NFS, iSCSI, local PVs).
type Volumes interface {
	VolumeDir(pod *v1.Pod, name string) string
	StatFSDir(pod *v1.Pod, vol *v1.Volume) (string, bool)
}

// agentStart is when hostlet started (near enough: when this package was
// loaded): the kubelet's summary gives its kubelet system container the
// time its summary provider was made, at the kubelet's start, rather than
// its cgroup's.
var agentStart = metav1.Now()

// nodeKey is the node's entry in the CPU sample cache, beside container IDs.
const nodeKey = "/"

// cpuSample is one reading of a cumulative CPU counter.
type cpuSample struct {
	usage uint64
	at    time.Time
}

// cpuRates turns cumulative CPU counters into nano-cores as the kubelet's
// CRI stats provider does: the rate since the previous request's sample,
// kept per container. No sampler runs between requests: metrics-server
// reads /metrics/resource (cumulative seconds, it computes rates itself)
// and a reader of /stats/summary polls anyway, so the rate over its own
// polling interval is the one it asks for. The first request has none.
type cpuRates struct {
	mu   sync.Mutex
	last map[string]cpuSample
}

// nanoCores records the sample and returns the rate since the previous one
// of the same key, or nil when there is none to compare with (first
// sample, a counter that went back: a new container under the same ID).
func (c *cpuRates) nanoCores(key string, usage uint64, at time.Time) *uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]cpuSample{}
	}
	prev, ok := c.last[key]
	if ok && !at.After(prev.at) {
		// An older or the same sample (concurrent requests): keep the
		// newer one and give no rate rather than a wrong one.
		return nil
	}
	c.last[key] = cpuSample{usage: usage, at: at}
	if !ok || usage < prev.usage {
		return nil
	}
	rate := uint64(float64(usage-prev.usage) / at.Sub(prev.at).Seconds())
	return &rate
}

// forget drops the samples of keys no longer reported.
func (c *cpuRates) forget(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.last {
		if !keep[k] {
			delete(c.last, k)
		}
	}
}

// serveSummary answers /stats/summary; ?only_cpu_and_memory=true, as the
// kubelet, leaves out the filesystems and the network.
func (s *server) serveSummary(w http.ResponseWriter, r *http.Request) {
	sum, err := s.summary(r.Context(), r.URL.Query().Get("only_cpu_and_memory") != "true")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "Internal Error: failed to get stats: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(sum)
}

// summary is the kubelet's stats summary of the node and the pods it runs.
// full adds filesystems, volumes and the network to CPU and memory.
func (s *server) summary(ctx context.Context, full bool) (*statsv1alpha1.Summary, error) {
	nodeStats, err := s.cfg.Node.Stats(ctx)
	if err != nil {
		return nil, err
	}
	if !full {
		nodeStats.Network, nodeStats.Fs, nodeStats.Runtime, nodeStats.Rlimit = nil, nil, nil, nil
	}
	seen := map[string]bool{nodeKey: true}
	if c := nodeStats.CPU; c != nil && c.UsageCoreNanoSeconds != nil {
		c.UsageNanoCores = s.cpu.nanoCores(nodeKey, *c.UsageCoreNanoSeconds, c.Time.Time)
	}
	pods, err := s.cfg.Pods.GetPods(ctx)
	if err != nil {
		return nil, err
	}
	samples, err := s.cfg.Stats.ContainerStats(ctx)
	if err != nil {
		return nil, err
	}
	var imageFs *statsv1alpha1.FsStats
	if nodeStats.Runtime != nil {
		imageFs = nodeStats.Runtime.ImageFs
	}
	if s.cfg.Cgroups != nil {
		// The root cgroup's swap, as the kubelet's cAdvisor "/" has it.
		if root, err := s.cfg.Cgroups.CgroupStats("/"); err == nil {
			// cAdvisor's root container is limited by the machine: its swap
			// limit is the host's swap (SwapTotal).
			root.Spec.SwapLimit = uint64(max(runtime.SwapCapacity("/proc/meminfo"), 0))
			nodeStats.Swap = cgroupSwap(root)
			if nodeStats.CPU != nil {
				nodeStats.CPU.PSI = cgroupPSI(root.Pressure, cpuPSI)
			}
			if nodeStats.Memory != nil {
				nodeStats.Memory.PSI = cgroupPSI(root.Pressure, memoryPSI)
			}
			if full {
				nodeStats.IO = cgroupIO(root)
			}
		}
	}
	nodeStats.SystemContainers = s.systemContainers(seen, full)
	sum := &statsv1alpha1.Summary{Node: *nodeStats, Pods: []statsv1alpha1.PodStats{}}
	for _, pod := range pods {
		ps := s.podStats(ctx, pod, samples, seen, imageFs)
		if len(ps.Containers) == 0 {
			continue // no sandbox yet or all containers gone: the kubelet leaves such pods out
		}
		sum.Pods = append(sum.Pods, ps)
	}
	s.cpu.forget(seen)
	return sum, nil
}

// systemContainers are the node's system containers' CPU, memory and swap, as
// the kubelet's summary reads them from their cgroups (in name order; one
// whose cgroup cannot be read is left out, as the kubelet leaves it).
func (s *server) systemContainers(seen map[string]bool, full bool) []statsv1alpha1.ContainerStats {
	if s.cfg.Cgroups == nil || len(s.cfg.SystemContainers) == 0 {
		return nil
	}
	names := make([]string, 0, len(s.cfg.SystemContainers))
	for n := range s.cfg.SystemContainers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []statsv1alpha1.ContainerStats
	for _, n := range names {
		cg, err := s.cfg.Cgroups.CgroupStats(s.cfg.SystemContainers[n])
		if err != nil {
			continue
		}
		key := "system/" + n
		seen[key] = true
		cpu, mem := cgroupCPUMemory(cg, s.cpu.nanoCores(key, cg.CPU.Total, cg.Time))
		cs := statsv1alpha1.ContainerStats{Name: n, StartTime: metav1.NewTime(cg.Created), CPU: cpu, Memory: mem, Swap: cgroupSwap(cg)}
		if n == statsv1alpha1.SystemContainerKubelet {
			cs.StartTime = agentStart
		}
		if full {
			cs.IO = cgroupIO(cg)
		}
		out = append(out, cs)
	}
	return out
}

// podStats are a pod's figures: its live containers', and the pod's CPU,
// memory and swap from its own cgroup (the containers' CPU and memory
// sums for a pod without one). Only CPU, memory and swap without imageFs
// (the filesystem of containers' writable layers), all of them with it,
// the process count too.
func (s *server) podStats(ctx context.Context, pod *v1.Pod, samples map[string]runtime.ContainerStats, seen map[string]bool, imageFs *statsv1alpha1.FsStats) statsv1alpha1.PodStats {
	full := imageFs != nil
	ps := statsv1alpha1.PodStats{
		PodRef: statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
	}
	if pod.Status.StartTime != nil {
		ps.StartTime = *pod.Status.StartTime
	}
	limits := memoryLimits(pod)
	statuses := allStatuses(pod)
	podCgroup, cgroupNames := s.podCgroups(pod, samples, statuses)
	var ephemeral runtime.DiskUsage
	for _, st := range statuses {
		id := containerIDOf(&st)
		sample, ok := samples[id]
		if id == "" || !ok {
			continue
		}
		seen[id] = true
		cs := containerStats(st, sample, limits[st.Name])
		cs.CPU.UsageNanoCores = s.cpu.nanoCores(id, sample.CPUUsageNanos, sample.Time)
		// The container's own cgroup, as cAdvisor reads it for the
		// kubelet: its swap, and its processes, which the pod's count sums.
		if name := cgroupNames[id]; name != "" {
			if cg, err := s.cfg.Cgroups.CgroupStats(name); err == nil {
				cs.Swap = cgroupSwap(cg)
				cs.CPU.PSI = cgroupPSI(cg.Pressure, cpuPSI)
				cs.Memory.PSI = cgroupPSI(cg.Pressure, memoryPSI)
				if full {
					cs.IO = cgroupIO(cg)
					ps.ProcessStats = mergeProcessStats(ps.ProcessStats, cg.Processes)
				}
			}
		}
		if full {
			cs.Rootfs, cs.Logs = s.containerFs(ctx, pod, st, id, imageFs, &ephemeral)
		}
		ps.Containers = append(ps.Containers, cs)
	}
	ps.CPU, ps.Memory = podSums(ps.Containers)
	if podCgroup != "" && len(ps.Containers) > 0 {
		// The pod's cgroup, as the kubelet's CRI stats provider prefers
		// it to the containers' sums: the sandbox's and exited containers'
		// share counted, and the pod's limit (its containers' limits
		// summed) making availableBytes.
		if cg, err := s.cfg.Cgroups.CgroupStats(podCgroup); err == nil {
			key := "pod/" + string(pod.UID)
			seen[key] = true
			ps.CPU, ps.Memory = cgroupCPUMemory(cg, s.cpu.nanoCores(key, cg.CPU.Total, cg.Time))
			ps.Swap = cgroupSwap(cg)
			if full {
				ps.IO = cgroupIO(cg)
			}
		}
	}
	if !full {
		return ps
	}
	now := metav1.Now()
	if ifaces, err := s.cfg.Stats.PodNetworkStats(string(pod.UID)); err == nil {
		ps.Network = node.NetworkStats(ifaces, now)
	}
	for _, vol := range pod.Spec.Volumes {
		if !volumemanager.HasStats(vol) {
			if vs, ok := s.csiVolumeStats(ctx, pod, &vol, now); ok {
				ps.VolumeStats = append(ps.VolumeStats, vs)
			} else if dir, ok := s.cfg.Volumes.StatFSDir(pod, &vol); ok {
				if fs := volumeFsStats(dir, now); fs != nil {
					vs := statsv1alpha1.VolumeStats{Name: vol.Name, FsStats: *fs}
					if claim, _, ok := volumes.ClaimName(pod, &vol); ok {
						vs.PVCRef = &statsv1alpha1.PVCReference{Name: claim, Namespace: pod.Namespace}
					}
					ps.VolumeStats = append(ps.VolumeStats, vs)
				}
			}
			continue
		}
		dir := s.cfg.Volumes.VolumeDir(pod, vol.Name)
		u, err := s.cfg.Usage.DirUsage(dir)
		if err != nil {
			continue
		}
		fs := node.FsStats(dir, now)
		if fs == nil {
			continue
		}
		fs.UsedBytes, fs.InodesUsed = ptr.To(u.Bytes), ptr.To(u.Inodes)
		ps.VolumeStats = append(ps.VolumeStats, statsv1alpha1.VolumeStats{Name: vol.Name, FsStats: *fs})
		if volumemanager.IsLocalEphemeral(vol) {
			ephemeral.Bytes += u.Bytes
			ephemeral.Inodes += u.Inodes
		}
	}
	if fs := node.FsStats(s.cfg.Runtime.LogDir(pod.Namespace, pod.Name, string(pod.UID)), now); fs != nil {
		fs.UsedBytes, fs.InodesUsed = ptr.To(ephemeral.Bytes), ptr.To(ephemeral.Inodes)
		ps.EphemeralStorage = fs
	}
	return ps
}

// containerFs are a container's writable layer and logs; both count in the
// pod's ephemeral storage.
func (s *server) containerFs(ctx context.Context, pod *v1.Pod, st v1.ContainerStatus, id string, imageFs *statsv1alpha1.FsStats, ephemeral *runtime.DiskUsage) (rootfs, logs *statsv1alpha1.FsStats) {
	now := metav1.Now()
	if u, err := s.cfg.Usage.RootfsUsage(ctx, id); err == nil {
		fs := *imageFs
		fs.UsedBytes, fs.InodesUsed = ptr.To(u.Bytes), ptr.To(u.Inodes)
		rootfs = &fs
		ephemeral.Bytes += u.Bytes
		ephemeral.Inodes += u.Inodes
	} else {
		log.WithError(err).WithField("container", id).Debug("rootfs usage")
	}
	dir := filepath.Join(s.cfg.Runtime.LogDir(pod.Namespace, pod.Name, string(pod.UID)), st.Name)
	if u, err := s.cfg.Usage.DirUsage(dir); err == nil {
		if logs = node.FsStats(dir, now); logs != nil {
			logs.UsedBytes, logs.InodesUsed = ptr.To(u.Bytes), ptr.To(u.Inodes)
			ephemeral.Bytes += u.Bytes
			ephemeral.Inodes += u.Inodes
		}
	}
	return rootfs, logs
}

// containerStats are one container's CPU and memory from its cgroup sample;
// available memory is what is left below its limit, if it has one.
func containerStats(st v1.ContainerStatus, sample runtime.ContainerStats, limit uint64) statsv1alpha1.ContainerStats {
	at := metav1.NewTime(sample.Time)
	cs := statsv1alpha1.ContainerStats{
		Name: st.Name,
		CPU:  &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: ptr.To(sample.CPUUsageNanos)},
		Memory: &statsv1alpha1.MemoryStats{
			Time: at, UsageBytes: ptr.To(sample.MemoryUsage), WorkingSetBytes: ptr.To(sample.WorkingSet),
			RSSBytes: ptr.To(sample.RSS), PageFaults: ptr.To(sample.PageFaults), MajorPageFaults: ptr.To(sample.MajorPageFaults),
		},
	}
	if limit > 0 {
		avail := uint64(0)
		if limit > sample.WorkingSet {
			avail = limit - sample.WorkingSet
		}
		cs.Memory.AvailableBytes = &avail
	}
	if st.State.Running != nil {
		cs.StartTime = st.State.Running.StartedAt
	}
	return cs
}

// podSums add the containers' CPU and memory up, as the kubelet's CRI
// stats provider does for a pod without cgroup stats of its own. The pod's
// nano-cores exist only when every container's do.
func podSums(cs []statsv1alpha1.ContainerStats) (*statsv1alpha1.CPUStats, *statsv1alpha1.MemoryStats) {
	if len(cs) == 0 {
		return nil, nil
	}
	cpu := &statsv1alpha1.CPUStats{UsageCoreNanoSeconds: new(uint64), UsageNanoCores: new(uint64)}
	mem := &statsv1alpha1.MemoryStats{UsageBytes: new(uint64), WorkingSetBytes: new(uint64), RSSBytes: new(uint64),
		PageFaults: new(uint64), MajorPageFaults: new(uint64)}
	for _, c := range cs {
		if c.CPU.Time.After(cpu.Time.Time) {
			cpu.Time, mem.Time = c.CPU.Time, c.Memory.Time
		}
		*cpu.UsageCoreNanoSeconds += *c.CPU.UsageCoreNanoSeconds
		if c.CPU.UsageNanoCores == nil || cpu.UsageNanoCores == nil {
			cpu.UsageNanoCores = nil
		} else {
			*cpu.UsageNanoCores += *c.CPU.UsageNanoCores
		}
		*mem.UsageBytes += *c.Memory.UsageBytes
		*mem.WorkingSetBytes += *c.Memory.WorkingSetBytes
		*mem.RSSBytes += *c.Memory.RSSBytes
		*mem.PageFaults += *c.Memory.PageFaults
		*mem.MajorPageFaults += *c.Memory.MajorPageFaults
	}
	return cpu, mem
}

// podCgroups names the pod's cgroup ("" for none) and its containers',
// by ID, of the containers that have samples.
func (s *server) podCgroups(pod *v1.Pod, samples map[string]runtime.ContainerStats, statuses []v1.ContainerStatus) (string, map[string]string) {
	if s.cfg.Cgroups == nil {
		return "", nil
	}
	var ids []string
	for i := range statuses {
		if id := containerIDOf(&statuses[i]); id != "" {
			if _, ok := samples[id]; ok {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return "", nil
	}
	podCgroup, names, err := s.cfg.Cgroups.PodCgroupNames(string(pod.UID), ids)
	if err != nil {
		return "", nil
	}
	return podCgroup, names
}

// unlimitedMemory is the kubelet's isMemoryUnlimited bound: a limit above
// it is none (v1's unlimited is near 2^63, v2's max reads as more).
const unlimitedMemory = uint64(1 << 62)

// cgroupCPUMemory are a cgroup's CPU and memory as the kubelet's
// cadvisorInfoToCPUandMemoryStats makes them: availableBytes the limit
// less the working set where there is a limit; a cgroup without the
// memory controller has a zero working set only. nanoCores is the rate
// since the previous request (nil on the first).
func cgroupCPUMemory(cg runtime.CgroupStats, nanoCores *uint64) (*statsv1alpha1.CPUStats, *statsv1alpha1.MemoryStats) {
	at := metav1.NewTime(cg.Time)
	cpu := &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: ptr.To(cg.CPU.Total), UsageNanoCores: nanoCores,
		PSI: cgroupPSI(cg.Pressure, cpuPSI)}
	if !cg.Spec.HasMemory {
		return cpu, &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: ptr.To[uint64](0)}
	}
	m := cg.Memory
	mem := &statsv1alpha1.MemoryStats{Time: at, UsageBytes: ptr.To(m.Usage), WorkingSetBytes: ptr.To(m.WorkingSet),
		RSSBytes: ptr.To(m.RSS), PageFaults: ptr.To(m.PageFaults), MajorPageFaults: ptr.To(m.MajorPageFaults),
		PSI: cgroupPSI(cg.Pressure, memoryPSI)}
	if cg.Spec.MemoryLimit <= unlimitedMemory {
		mem.AvailableBytes = ptr.To(sub(cg.Spec.MemoryLimit, m.WorkingSet))
	}
	return cpu, mem
}

// cgroupSwap is a cgroup's swap as the kubelet's cadvisorInfoToSwapStats
// makes it: the swap used (v1's total_swap, v2's memory.swap.current)
// and, under a limit (v1's memory+swap memsw.limit_in_bytes, v2's
// memory.swap.max), the limit less the use; nil without the memory
// controller.
func cgroupSwap(cg runtime.CgroupStats) *statsv1alpha1.SwapStats {
	if !cg.Spec.HasMemory {
		return nil
	}
	s := &statsv1alpha1.SwapStats{Time: metav1.NewTime(cg.Time), SwapUsageBytes: ptr.To(cg.Memory.Swap)}
	if cg.Spec.SwapLimit <= unlimitedMemory {
		s.SwapAvailableBytes = ptr.To(sub(cg.Spec.SwapLimit, cg.Memory.Swap))
	}
	return s
}

// cgroupPSI is a resource's PSI as the kubelet's cadvisorPSIToStatsPSI
// makes it with its KubeletPSI gate (beta, on by default): the kernel's
// lines (totals in microseconds, as cAdvisor has them) where it keeps them
// per cgroup (v2), zeros elsewhere (cgroup v1), as cAdvisor's zero value.
func cgroupPSI(p *runtime.CgroupPressure, pick func(*runtime.CgroupPressure) runtime.PSI) *statsv1alpha1.PSIStats {
	var v runtime.PSI
	if p != nil {
		v = pick(p)
	}
	line := func(d runtime.PSIData) statsv1alpha1.PSIData {
		return statsv1alpha1.PSIData{Total: d.Total, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &statsv1alpha1.PSIStats{Full: line(v.Full), Some: line(v.Some)}
}

func cpuPSI(p *runtime.CgroupPressure) runtime.PSI    { return p.CPU }
func memoryPSI(p *runtime.CgroupPressure) runtime.PSI { return p.Memory }

// cgroupIO is a cgroup's I/O as the kubelet's cadvisorInfoToIOStats:
// its pressure (cgroupPSI).
func cgroupIO(cg runtime.CgroupStats) *statsv1alpha1.IOStats {
	return &statsv1alpha1.IOStats{Time: metav1.NewTime(cg.Time),
		PSI: cgroupPSI(cg.Pressure, func(p *runtime.CgroupPressure) runtime.PSI { return p.IO })}
}

// mergeProcessStats adds a container's process count to the pod's, as
// the kubelet's mergeProcessStats sums its containers'.
func mergeProcessStats(ps *statsv1alpha1.ProcessStats, processes uint64) *statsv1alpha1.ProcessStats {
	if ps == nil {
		return &statsv1alpha1.ProcessStats{ProcessCount: ptr.To(processes)}
	}
	*ps.ProcessCount += processes
	return ps
}

// sub is a - b, 0 below zero.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// allStatuses are the statuses of every container of the pod, init and
// ephemeral ones included: any of them may be running.
func allStatuses(pod *v1.Pod) []v1.ContainerStatus {
	out := append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...)
	out = append(out, pod.Status.ContainerStatuses...)
	return append(out, pod.Status.EphemeralContainerStatuses...)
}

// memoryLimits are the containers' memory limits in bytes, by name.
func memoryLimits(pod *v1.Pod) map[string]uint64 {
	out := map[string]uint64{}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok && q.Value() > 0 {
				out[c.Name] = uint64(q.Value())
			}
		}
	}
	return out
}

// csiVolumeStats are a pod's CSI volume's figures as its driver reports
// them (NodeGetVolumeStats), with the claim a PersistentVolume's is of, as
// the kubelet's volume stats calculator; ok is false for a volume that is
// not CSI or a driver that does not report.
func (s *server) csiVolumeStats(ctx context.Context, pod *v1.Pod, vol *v1.Volume, now metav1.Time) (statsv1alpha1.VolumeStats, bool) {
	if s.cfg.CSI == nil {
		return statsv1alpha1.VolumeStats{}, false
	}
	st, ok, err := s.cfg.CSI.VolumeStats(ctx, pod, vol.Name)
	if err != nil || !ok {
		return statsv1alpha1.VolumeStats{}, false
	}
	vs := statsv1alpha1.VolumeStats{Name: vol.Name, FsStats: statsv1alpha1.FsStats{Time: now,
		CapacityBytes: ptr.To(uint64(st.CapacityBytes)), AvailableBytes: ptr.To(uint64(st.AvailableBytes)), UsedBytes: ptr.To(uint64(st.UsedBytes)),
		Inodes: ptr.To(uint64(st.Inodes)), InodesFree: ptr.To(uint64(st.InodesFree)), InodesUsed: ptr.To(uint64(st.InodesUsed))}}
	if claim, _, ok := volumes.ClaimName(pod, vol); ok {
		vs.PVCRef = &statsv1alpha1.PVCReference{Name: claim, Namespace: pod.Namespace}
	}
	return vs, true
}

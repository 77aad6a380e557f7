package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	cgroupsfs "github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"
)

// CgroupStats is one reading of a cgroup: what cAdvisor's libcontainer
// handler and its GetSpec read of it, for cgroup v1 and v2 alike. The
// counters come from the library cAdvisor reads them with
// (opencontainers/cgroups), mapped as cAdvisor maps them, so each figure
// means what the same cAdvisor series means on a kubelet's node.
type CgroupStats struct {
	// Time is when the cgroup was read.
	Time time.Time
	// Created is cAdvisor's creation time of the cgroup: the oldest
	// modification time of its directories (and of cgroup.clone_children
	// or cgroup.events in them), not before the boot.
	Created time.Time
	CPU     CgroupCPU
	Memory  CgroupMemoryStats
	// OOMKills counts the processes the OOM killer ended in the cgroup:
	// oom_kill of memory.oom_control (v1) or memory.events (v2).
	OOMKills uint64
	// Threads are the tasks the pids controller counts (hierarchically);
	// ThreadsMax its limit, 0 for none.
	Threads, ThreadsMax uint64
	// Processes, FDs and Sockets count the processes of the cgroup itself
	// (its cgroup.procs in the cpu hierarchy, not its children's, as
	// cAdvisor counts them) and their open files and sockets.
	Processes, FDs, Sockets uint64
	// IO is the block I/O the cgroup did, per device.
	IO []CgroupIO
	// Pressure is the cgroup's PSI, where the kernel keeps it (cgroup v2);
	// nil elsewhere.
	Pressure *CgroupPressure
	Spec     CgroupSpec
}

// CgroupCPU is a cgroup's CPU time in nanoseconds and its CFS throttling.
type CgroupCPU struct {
	Total, User, System       uint64
	Periods, ThrottledPeriods uint64
	// ThrottledTime is in nanoseconds.
	ThrottledTime uint64
}

// CgroupMemoryStats is a cgroup's memory as cAdvisor reports it, in bytes
// (page faults in events).
type CgroupMemoryStats struct {
	// Usage counts page cache; WorkingSet is usage less inactive file
	// pages.
	Usage, MaxUsage, WorkingSet  uint64
	Cache, RSS, Swap, MappedFile uint64
	ActiveFile, InactiveFile     uint64
	PageFaults, MajorPageFaults  uint64
	// TotalPageFaults and TotalMajorPageFaults are the hierarchy's, as
	// containerd's CRI reports a sandbox's: v1's total_pgfault and
	// total_pgmajfault, v2's counts (hierarchical already).
	TotalPageFaults, TotalMajorPageFaults uint64
	// Failcnt counts hits of the limit; v1 only (HasFailcnt).
	Failcnt    uint64
	HasFailcnt bool
	// KernelUsage is v1's kmem usage, or v2's "kernel" of memory.stat
	// (since Linux 5.18), where HasKernelUsage.
	KernelUsage    uint64
	HasKernelUsage bool
}

// CgroupIO is the block I/O of a cgroup on one device (major:minor).
type CgroupIO struct {
	Major, Minor          uint64
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64
}

// CgroupPressure is the total stall time, in microseconds, of a cgroup's
// tasks: some of them waiting (Some) or all of them stalled (Full), for
// CPU, memory and I/O.
type CgroupPressure struct {
	CPUSome, CPUFull       uint64
	MemorySome, MemoryFull uint64
	IOSome, IOFull         uint64
	// CPU, Memory and IO are the kernel's whole PSI lines, the averages
	// with the totals, as cAdvisor reads them for the stats summary.
	CPU, Memory, IO PSI
}

// PSI is one resource's pressure: some tasks waiting, all of them stalled.
type PSI struct{ Some, Full PSIData }

// PSIData is a PSI line: the share of time stalled (percent) over 10, 60
// and 300 seconds, and the total stall time in microseconds.
type PSIData struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64
}

// psiOf is the library's PSI lines as ours.
func psiOf(p *cgroups.PSIStats) PSI {
	line := func(d cgroups.PSIData) PSIData {
		return PSIData{Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300, Total: d.Total}
	}
	return PSI{Some: line(p.Some), Full: line(p.Full)}
}

// CgroupSpec is a cgroup's limits as cAdvisor reads them into its spec.
// Shares are v1's cpu.shares, or v2's cpu.weight mapped back onto them;
// Quota and Period are in microseconds (Quota 0: none). Memory values are
// bytes, math.MaxUint64 for "max".
type CgroupSpec struct {
	HasCPU                              bool
	Shares, Quota, Period               uint64
	HasMemory                           bool
	MemoryLimit, SwapLimit, Reservation uint64
}

// NodeCgroups are the cgroups the kubelet's cAdvisor reports besides the
// pods' and containers': the root and, with --cgroups-per-qos, kubepods
// and its burstable and besteffort QoS cgroups, by name (the path from
// the hierarchies' root, in the driver's form).
func (c *Cgroups) NodeCgroups() []string {
	out := []string{"/"}
	if !c.perQOS {
		return out
	}
	for _, n := range []CgroupName{c.pods, c.qosName(QOSBurstable), c.qosName(QOSBestEffort)} {
		if name := c.name(n); name != "/" {
			out = append(out, name)
		}
	}
	return out
}

// PodCgroupName is the name of the cgroup of the pod whose containers go
// below parent (its sandbox's CgroupParent): parent itself, or "" when
// the pod has none of its own (no --cgroups-per-qos).
func (c *Cgroups) PodCgroupName(parent string) string {
	if !c.perQOS || parent == "" {
		return ""
	}
	return parent
}

// ContainerCgroupName is the name of a container's cgroup below parent,
// as runc makes it from the cgroupsPath withCgroupParent gives: a path
// for cgroupfs, the systemd driver's cri-containerd-<id>.scope in the
// parent slice. "" when parent is empty (containerd's default place).
func ContainerCgroupName(parent, id string) string {
	if parent == "" {
		return ""
	}
	if !strings.HasSuffix(parent, ".slice") {
		return filepath.Join(parent, id)
	}
	if parent == "-.slice" {
		parent = "/"
	}
	return filepath.Join(parent, "cri-containerd-"+id+".scope")
}

// v1Subsystems are the v1 controllers cAdvisor's figures come from.
var v1Subsystems = []string{"cpu", "cpuacct", "memory", "blkio", "pids"}

// cgroupPaths are the directories of cgroup name: one per v1 controller
// (keyed by its name), or the unified one (keyed by "").
func (c *Cgroups) cgroupPaths(name string) (map[string]string, error) {
	if c.v2 {
		return map[string]string{"": filepath.Join(unifiedMountpoint, name)}, nil
	}
	mounts, err := c.subsystemMounts()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range v1Subsystems {
		if m, ok := mounts[s]; ok {
			out[s] = filepath.Join(m, name)
		}
	}
	return out, nil
}

// subsystemMounts are the v1 controllers' mount points, read once: they
// do not move while the host runs.
func (c *Cgroups) subsystemMounts() (map[string]string, error) {
	c.v1Once.Do(func() {
		ms, err := cgroups.GetCgroupMounts(false)
		if err != nil {
			c.v1Err = err
			return
		}
		c.v1Mounts = map[string]string{}
		for _, m := range ms {
			for _, s := range m.Subsystems {
				if _, ok := c.v1Mounts[s]; !ok {
					c.v1Mounts[s] = m.Mountpoint
				}
			}
		}
	})
	return c.v1Mounts, c.v1Err
}

// CgroupStats reads cgroup name (NodeCgroups, PodCgroupName,
// ContainerCgroupName). A cgroup that does not exist (a container whose
// task is gone) is fs.ErrNotExist.
func (c *Cgroups) CgroupStats(name string) (CgroupStats, error) {
	paths, err := c.cgroupPaths(name)
	if err != nil {
		return CgroupStats{}, err
	}
	return readCgroupStats(paths, c.v2, name == "/", time.Now(), bootTime())
}

// cgroupStatsReader is the library's v1 or v2 manager.
type cgroupStatsReader interface {
	GetStats() (*cgroups.Stats, error)
}

// readCgroupStats reads one cgroup from its directories (cgroupPaths):
// the library's statistics, then what cAdvisor reads beside it (limits,
// OOM kills, processes). root is the root cgroup, where v2 keeps only
// some of the files (cAdvisor takes what is there).
func readCgroupStats(paths map[string]string, v2, root bool, now, boot time.Time) (CgroupStats, error) {
	cpuDir, memDir := paths["cpu"], paths["memory"]
	if v2 {
		cpuDir, memDir = paths[""], paths[""]
	}
	if cpuDir == "" {
		return CgroupStats{}, fmt.Errorf("no cpu hierarchy: %w", fs.ErrNotExist)
	}
	if _, err := os.Stat(cpuDir); err != nil {
		return CgroupStats{}, err
	}
	cfg := &cgroups.Cgroup{Resources: &cgroups.Resources{}}
	var m cgroupStatsReader
	if v2 {
		m2, err := fs2.NewManager(cfg, cpuDir)
		if err != nil {
			return CgroupStats{}, err
		}
		m = m2
	} else {
		have := map[string]string{}
		for s, p := range paths {
			if _, err := os.Stat(p); err == nil {
				have[s] = p
			}
		}
		// v1's root pids cgroup has no pids.current (nor a limit): the
		// library would fail the whole reading on it.
		if p, ok := have["pids"]; ok && !exists(filepath.Join(p, "pids.current")) {
			delete(have, "pids")
		}
		m1, err := cgroupsfs.NewManager(cfg, have)
		if err != nil {
			return CgroupStats{}, err
		}
		m = m1
	}
	st, err := m.GetStats()
	if err != nil {
		if !root || st == nil {
			if errors.Is(err, fs.ErrNotExist) {
				return CgroupStats{}, err
			}
			return CgroupStats{}, fmt.Errorf("reading cgroup %s: %w", cpuDir, err)
		}
		// The root cgroup lacks some files (v2's memory.current): take
		// what it has, as cAdvisor does.
	}
	out := CgroupStats{Time: now, Created: created(paths, v2, now, boot)}
	out.CPU = CgroupCPU{
		Total: st.CpuStats.CpuUsage.TotalUsage, User: st.CpuStats.CpuUsage.UsageInUsermode,
		System:  st.CpuStats.CpuUsage.UsageInKernelmode,
		Periods: st.CpuStats.ThrottlingData.Periods, ThrottledPeriods: st.CpuStats.ThrottlingData.ThrottledPeriods,
		ThrottledTime: st.CpuStats.ThrottlingData.ThrottledTime,
	}
	out.Memory = memoryStats(&st.MemoryStats, v2)
	out.Threads, out.ThreadsMax = st.PidsStats.Current, st.PidsStats.Limit
	out.IO = ioStats(st.BlkioStats)
	if v2 && st.CpuStats.PSI != nil && st.MemoryStats.PSI != nil && st.BlkioStats.PSI != nil {
		out.Pressure = &CgroupPressure{
			CPUSome: st.CpuStats.PSI.Some.Total, CPUFull: st.CpuStats.PSI.Full.Total,
			MemorySome: st.MemoryStats.PSI.Some.Total, MemoryFull: st.MemoryStats.PSI.Full.Total,
			IOSome: st.BlkioStats.PSI.Some.Total, IOFull: st.BlkioStats.PSI.Full.Total,
			CPU: psiOf(st.CpuStats.PSI), Memory: psiOf(st.MemoryStats.PSI), IO: psiOf(st.BlkioStats.PSI),
		}
	}
	if memDir != "" {
		oomFile := "memory.oom_control"
		if v2 {
			oomFile = "memory.events"
		}
		out.OOMKills = keyedValue(filepath.Join(memDir, oomFile), "oom_kill")
	}
	out.Processes, out.FDs, out.Sockets = processCounts(cpuDir)
	out.Spec = cgroupSpec(paths, v2)
	return out, nil
}

// memoryStats is cAdvisor's setMemoryStats: v2's anon and file, v1's
// hierarchical totals.
func memoryStats(ms *cgroups.MemoryStats, v2 bool) CgroupMemoryStats {
	out := CgroupMemoryStats{
		Usage: ms.Usage.Usage, MaxUsage: ms.Usage.MaxUsage, Failcnt: ms.Usage.Failcnt,
		KernelUsage: ms.KernelUsage.Usage,
		PageFaults:  ms.Stats["pgfault"], MajorPageFaults: ms.Stats["pgmajfault"],
	}
	out.TotalPageFaults, out.TotalMajorPageFaults = ms.Stats["total_pgfault"], ms.Stats["total_pgmajfault"]
	if v2 {
		out.TotalPageFaults, out.TotalMajorPageFaults = out.PageFaults, out.MajorPageFaults
	}
	prefix := ""
	switch {
	case v2:
		// v2 has no failcnt (the library reports 0); its kernel memory is
		// a key of memory.stat, which cAdvisor does not read (it reports
		// 0): reported where the kernel has it.
		out.KernelUsage, out.HasKernelUsage = ms.Stats["kernel"]
		out.Cache, out.RSS, out.MappedFile = ms.Stats["file"], ms.Stats["anon"], ms.Stats["file_mapped"]
		if ms.SwapUsage.Usage > ms.Usage.Usage {
			// The library reports v2's swap as memory+swap, as v1's memsw.
			out.Swap = ms.SwapUsage.Usage - ms.Usage.Usage
		}
	case ms.UseHierarchy:
		prefix = "total_"
		fallthrough
	default:
		out.HasFailcnt, out.HasKernelUsage = true, true
		out.Cache, out.RSS = ms.Stats[prefix+"cache"], ms.Stats[prefix+"rss"]
		out.Swap, out.MappedFile = ms.Stats[prefix+"swap"], ms.Stats[prefix+"mapped_file"]
	}
	// cAdvisor reads the working set from total_inactive_file on v1
	// whether or not the hierarchy is on.
	file := "total_"
	if v2 {
		file = ""
	}
	out.ActiveFile, out.InactiveFile = ms.Stats[file+"active_file"], ms.Stats[file+"inactive_file"]
	out.WorkingSet = workingSet(out.Usage, out.InactiveFile)
	return out
}

// ioStats are the per-device bytes and operations, the *_recursive
// files of v1's blkio (the library falls back to the throttle ones) or
// v2's io.stat.
func ioStats(b cgroups.BlkioStats) []CgroupIO {
	var out []CgroupIO
	at := func(major, minor uint64) *CgroupIO {
		for i := range out {
			if out[i].Major == major && out[i].Minor == minor {
				return &out[i]
			}
		}
		out = append(out, CgroupIO{Major: major, Minor: minor})
		return &out[len(out)-1]
	}
	for _, e := range b.IoServiceBytesRecursive {
		switch e.Op {
		case "Read", "read":
			at(e.Major, e.Minor).ReadBytes += e.Value
		case "Write", "write":
			at(e.Major, e.Minor).WriteBytes += e.Value
		}
	}
	for _, e := range b.IoServicedRecursive {
		switch e.Op {
		case "Read", "read":
			at(e.Major, e.Minor).Reads += e.Value
		case "Write", "write":
			at(e.Major, e.Minor).Writes += e.Value
		}
	}
	return out
}

// processCounts counts the processes in cgroup.procs of dir and their
// open files and sockets, as cAdvisor's processStatsFromProcs.
func processCounts(dir string) (procs, fds, sockets uint64) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, 0, 0
	}
	for _, pid := range strings.Fields(string(b)) {
		procs++
		fdDir := filepath.Join("/proc", pid, "fd")
		es, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		fds += uint64(len(es))
		for _, e := range es {
			if l, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && strings.HasPrefix(l, "socket") {
				sockets++
			}
		}
	}
	return procs, fds, sockets
}

// cgroupSpec is cAdvisor's GetSpec of the limits.
func cgroupSpec(paths map[string]string, v2 bool) CgroupSpec {
	var s CgroupSpec
	if v2 {
		dir := paths[""]
		s.HasCPU = true
		if w := readUint(dir, "cpu.weight"); w >= 1 && w <= 10000 {
			s.Shares = 2 + ((w-1)*262142)/9999
		}
		if quota, period, ok := strings.Cut(readString(dir, "cpu.max"), " "); ok {
			if quota != "max" {
				s.Quota = parseUint(quota)
			}
			s.Period = parseUint(period)
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.max")); err == nil {
			s.HasMemory = true
			s.MemoryLimit, s.SwapLimit = readUint(dir, "memory.max"), readUint(dir, "memory.swap.max")
			s.Reservation = readUint(dir, "memory.min")
		}
		return s
	}
	if dir, ok := paths["cpu"]; ok && exists(dir) {
		s.HasCPU = true
		s.Shares, s.Period = readUint(dir, "cpu.shares"), readUint(dir, "cpu.cfs_period_us")
		if q := readString(dir, "cpu.cfs_quota_us"); q != "" && q != "-1" {
			s.Quota = parseUint(q)
		}
	}
	if dir, ok := paths["memory"]; ok && exists(dir) {
		s.HasMemory = true
		s.MemoryLimit, s.SwapLimit = readUint(dir, "memory.limit_in_bytes"), readUint(dir, "memory.memsw.limit_in_bytes")
		s.Reservation = readUint(dir, "memory.soft_limit_in_bytes")
	}
	return s
}

// created is cAdvisor's creation time: directories' modification times
// change when children come and go, so cgroup.clone_children (v1) or
// cgroup.events (v2), rarely written, is read too; the oldest wins.
func created(paths map[string]string, v2 bool, now, boot time.Time) time.Time {
	lowest := now
	for _, dir := range paths {
		fi, err := os.Stat(dir)
		if err != nil {
			continue
		}
		if fi.ModTime().Before(lowest) {
			lowest = fi.ModTime()
		}
		file := "cgroup.clone_children"
		if v2 {
			file = "cgroup.events"
		}
		if fi, err := os.Stat(filepath.Join(dir, file)); err == nil && fi.ModTime().Before(lowest) {
			lowest = fi.ModTime()
		}
	}
	if lowest.Before(boot) {
		lowest = boot
	}
	if lowest.Equal(now) {
		return time.Time{}
	}
	return lowest
}

var (
	bootOnce sync.Once
	bootAt   time.Time
)

// bootTime is when the host booted, to the minute (as cAdvisor rounds it).
func bootTime() time.Time {
	bootOnce.Do(func() {
		now := time.Now()
		bootAt = now
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			bootAt = now.Add(-time.Duration(si.Uptime) * time.Second).Truncate(time.Minute)
		}
	})
	return bootAt
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func readString(dir, file string) string {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readUint reads a one-number cgroup file; "max" is math.MaxUint64, a
// missing or odd file 0.
func readUint(dir, file string) uint64 { return parseUint(readString(dir, file)) }

func parseUint(s string) uint64 {
	if s == "max" {
		return math.MaxUint64
	}
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// keyedValue is the value of key in a "key value" per line file
// (memory.events, memory.oom_control).
func keyedValue(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			return parseUint(strings.TrimSpace(v))
		}
	}
	return 0
}

// NodeCgroups are the cgroups reported besides pods' (Cgroups.NodeCgroups).
func (r *Runtime) NodeCgroups() []string { return r.cgroups.NodeCgroups() }

// PodCgroupNames names a pod's cgroup ("" when it has none of its own)
// and its containers', by ID, from its sandbox's cgroup parent.
func (r *Runtime) PodCgroupNames(uid string, ids []string) (string, map[string]string, error) {
	s, err := r.Sandbox(uid)
	if err != nil {
		return "", nil, err
	}
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		if n := ContainerCgroupName(s.CgroupParent, id); n != "" {
			out[id] = n
		}
	}
	return r.cgroups.PodCgroupName(s.CgroupParent), out, nil
}

// CgroupStats reads one cgroup (Cgroups.CgroupStats).
func (r *Runtime) CgroupStats(name string) (CgroupStats, error) { return r.cgroups.CgroupStats(name) }

package node

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// The node's figures come from the root cgroup where cgroup v1 has one
// (the kubelet reads the same through cAdvisor's "/" container) and from
// /proc otherwise: cgroup v2's root has no memory.current.
const (
	cgroupV1CPU    = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
	cgroupV1Memory = "/sys/fs/cgroup/memory"
	// userHZ is the unit of /proc/stat: 100 on every Linux architecture
	// Kubernetes runs on.
	userHZ = 100
)

// Stats is the node's part of the kubelet's stats summary: cumulative CPU,
// memory, network, the node and image filesystems and the process limit.
// CPU nano-cores are left to the caller, which keeps the previous sample.
func (n *Node) Stats(ctx context.Context) (*statsv1alpha1.NodeStats, error) {
	now := metav1.Now()
	cpu, boot, err := hostCPU()
	if err != nil {
		return nil, err
	}
	mem, err := hostMemory()
	if err != nil {
		return nil, err
	}
	mem.Time = now
	s := &statsv1alpha1.NodeStats{
		NodeName:  n.cfg.Name,
		StartTime: metav1.NewTime(boot),
		CPU:       &statsv1alpha1.CPUStats{Time: now, UsageCoreNanoSeconds: &cpu},
		Memory:    mem,
		Fs:        FsStats(n.cfg.RootDir, now),
		Rlimit:    rlimit(now),
	}
	if ifaces, err := runtime.ReadNetDev("/proc/net/dev"); err == nil {
		s.Network = NetworkStats(ifaces, now)
	}
	if dir := n.imageFsDir(ctx, true); dir != "" {
		// The containers' writable layers are on the image filesystem
		// (containerd's snapshotter root): the kubelet's CRI stats provider
		// reports it as both, its container filesystem not split.
		if fs := FsStats(dir, now); fs != nil {
			containerFs := *fs
			s.Runtime = &statsv1alpha1.RuntimeStats{ImageFs: fs, ContainerFs: &containerFs}
		}
	}
	return s, nil
}

// imageFsDir is containerd's snapshotter root, asked (if ask) until
// containerd answers.
func (n *Node) imageFsDir(ctx context.Context, ask bool) string {
	n.mu.Lock()
	dir := n.imageFs
	n.mu.Unlock()
	if dir != "" || !ask {
		return dir
	}
	dir, err := n.rt.ImageFsDir(ctx)
	if err != nil {
		return ""
	}
	n.mu.Lock()
	n.imageFs = dir
	n.mu.Unlock()
	return dir
}

// hostCPU is the CPU time all of the host's processes used, and the boot
// time (the start of the root container).
func hostCPU() (uint64, time.Time, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, time.Time{}, err
	}
	defer f.Close()
	var jiffies uint64
	var boot time.Time
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) > 8 && fields[0] == "cpu":
			// user nice system idle iowait irq softirq steal: all but idle
			// and iowait are busy.
			for i, v := range fields[1:9] {
				if i == 3 || i == 4 {
					continue
				}
				n, _ := strconv.ParseUint(v, 10, 64)
				jiffies += n
			}
		case len(fields) == 2 && fields[0] == "btime":
			sec, _ := strconv.ParseInt(fields[1], 10, 64)
			boot = time.Unix(sec, 0)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, time.Time{}, err
	}
	if v, err := strconv.ParseUint(readTrim(cgroupV1CPU), 10, 64); err == nil {
		return v, boot, nil
	}
	return jiffies * (uint64(time.Second) / userHZ), boot, nil
}

// hostMemory is the node's memory as the kubelet reports it: the working
// set is usage less inactive file pages, available is capacity less the
// working set (what eviction's memory.available means).
func hostMemory() (*statsv1alpha1.MemoryStats, error) {
	info, err := meminfo()
	if err != nil {
		return nil, err
	}
	total := info["MemTotal"]
	usage, inactiveFile, rss := total-info["MemFree"], info["Inactive(file)"], info["AnonPages"]
	var faults, majorFaults uint64
	if v, err := strconv.ParseUint(readTrim(cgroupV1Memory+"/memory.usage_in_bytes"), 10, 64); err == nil {
		st := cgroupStat(cgroupV1Memory + "/memory.stat")
		usage, inactiveFile, rss = v, st["total_inactive_file"], st["total_rss"]
		faults, majorFaults = st["total_pgfault"], st["total_pgmajfault"]
	}
	ws := uint64(0)
	if usage > inactiveFile {
		ws = usage - inactiveFile
	}
	avail := uint64(0)
	if total > ws {
		avail = total - ws
	}
	return &statsv1alpha1.MemoryStats{
		UsageBytes: &usage, WorkingSetBytes: &ws, RSSBytes: &rss, AvailableBytes: &avail,
		PageFaults: &faults, MajorPageFaults: &majorFaults,
	}, nil
}

// meminfo reads /proc/meminfo in bytes by field name.
func meminfo() (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, _ := strconv.ParseUint(f[0], 10, 64)
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		out[name] = v
	}
	return out, nil
}

// cgroupStat reads a "name value" cgroup file such as memory.stat.
func cgroupStat(path string) map[string]uint64 {
	out := map[string]uint64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok {
			out[name], _ = strconv.ParseUint(v, 10, 64)
		}
	}
	return out
}

// FsStats is a filesystem's capacity and use, from statfs of a directory
// on it.
func FsStats(dir string, now metav1.Time) *statsv1alpha1.FsStats {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return nil
	}
	bsize := uint64(fs.Bsize)
	capacity, avail := fs.Blocks*bsize, fs.Bavail*bsize
	used := (fs.Blocks - fs.Bfree) * bsize
	inodes, free := fs.Files, fs.Ffree
	usedInodes := inodes - free
	return &statsv1alpha1.FsStats{
		Time: now, CapacityBytes: &capacity, AvailableBytes: &avail, UsedBytes: &used,
		Inodes: &inodes, InodesFree: &free, InodesUsed: &usedInodes,
	}
}

// NetworkStats are interfaces' counters as the summary has them; the
// default interface is eth0, as the kubelet's, or else the first one.
func NetworkStats(ifaces []runtime.InterfaceStats, now metav1.Time) *statsv1alpha1.NetworkStats {
	if len(ifaces) == 0 {
		return nil
	}
	s := &statsv1alpha1.NetworkStats{Time: now}
	for _, i := range ifaces {
		s.Interfaces = append(s.Interfaces, statsv1alpha1.InterfaceStats{
			Name:    i.Name,
			RxBytes: ptr.To(i.RxBytes), RxErrors: ptr.To(i.RxErrors),
			TxBytes: ptr.To(i.TxBytes), TxErrors: ptr.To(i.TxErrors),
		})
	}
	s.InterfaceStats = s.Interfaces[0]
	for _, i := range s.Interfaces {
		if i.Name == "eth0" {
			s.InterfaceStats = i
		}
	}
	return s
}

// rlimit is the host's process limit and count, as the kubelet reports it.
func rlimit(now metav1.Time) *statsv1alpha1.RlimitStats {
	s := &statsv1alpha1.RlimitStats{Time: now}
	if v, err := strconv.ParseInt(readTrim("/proc/sys/kernel/pid_max"), 10, 64); err == nil {
		s.MaxPID = &v
	}
	var info unix.Sysinfo_t
	if unix.Sysinfo(&info) == nil {
		procs := int64(info.Procs)
		s.NumOfRunningProcesses = &procs
	}
	return s
}

package runtime

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cgroup1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroup2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"
	cnins "github.com/containernetworking/plugins/pkg/ns"
)

// ContainerStats is one sample of a container's cgroup, as containerd's
// task metrics report it (cgroup v1 or v2, decoded alike).
type ContainerStats struct {
	Time time.Time
	// CPUUsageNanos is the cumulative CPU time of the cgroup.
	CPUUsageNanos uint64
	// MemoryUsage counts page cache; WorkingSet is usage minus the
	// inactive file pages, which the kernel reclaims first (cAdvisor's
	// definition, the one eviction and metrics-server use).
	MemoryUsage, WorkingSet, RSS uint64
	PageFaults, MajorPageFaults  uint64
	// MemoryLimit is the cgroup's memory limit (v1's limit_in_bytes, v2's
	// memory.max; a huge number for none).
	MemoryLimit uint64
}

// InterfaceStats are one network interface's counters.
type InterfaceStats struct {
	Name                 string
	RxBytes, RxErrors    uint64
	TxBytes, TxErrors    uint64
	RxPackets, TxPackets uint64
	RxDropped, TxDropped uint64
}

// DiskUsage is the space and inodes a directory tree or snapshot takes.
type DiskUsage struct {
	Bytes, Inodes uint64
}

// ContainerStats samples every task of hostlet's namespace in one call to
// containerd, by container ID. A container without a live task is absent.
func (r *Runtime) ContainerStats(ctx context.Context) (map[string]ContainerStats, error) {
	ctx = namespaces.WithNamespace(ctx, r.ns)
	resp, err := r.client.TaskService().Metrics(ctx, &tasks.MetricsRequest{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]ContainerStats, len(resp.Metrics))
	for _, m := range resp.Metrics {
		st, err := decodeMetric(m)
		if err != nil {
			// One task's odd metrics must not hide the others'.
			continue
		}
		out[m.ID] = st
	}
	return out, nil
}

// decodeMetric turns containerd's metric (a cgroup v1 or v2 Metrics message
// in an Any) into ContainerStats.
func decodeMetric(m *types.Metric) (ContainerStats, error) {
	if m.Data == nil {
		return ContainerStats{}, fmt.Errorf("task %s: no metrics", m.ID)
	}
	v, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return ContainerStats{}, err
	}
	st := ContainerStats{}
	if m.Timestamp != nil {
		st.Time = m.Timestamp.AsTime()
	}
	switch s := v.(type) {
	case *cgroup1.Metrics:
		if s.CPU != nil && s.CPU.Usage != nil {
			st.CPUUsageNanos = s.CPU.Usage.Total
		}
		if mem := s.Memory; mem != nil {
			if mem.Usage != nil {
				st.MemoryUsage, st.MemoryLimit = mem.Usage.Usage, mem.Usage.Limit
			}
			st.WorkingSet = workingSet(st.MemoryUsage, mem.TotalInactiveFile)
			st.RSS = mem.TotalRSS
			st.PageFaults, st.MajorPageFaults = mem.TotalPgFault, mem.TotalPgMajFault
		}
	case *cgroup2.Metrics:
		if s.CPU != nil {
			st.CPUUsageNanos = s.CPU.UsageUsec * 1000
		}
		if mem := s.Memory; mem != nil {
			st.MemoryUsage, st.MemoryLimit = mem.Usage, mem.UsageLimit
			st.WorkingSet = workingSet(mem.Usage, mem.InactiveFile)
			st.RSS = mem.Anon
			st.PageFaults, st.MajorPageFaults = mem.Pgfault, mem.Pgmajfault
		}
	default:
		return ContainerStats{}, fmt.Errorf("task %s: unknown metrics type %T", m.ID, v)
	}
	return st, nil
}

// workingSet is usage less inactive file pages, never below zero.
func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile >= usage {
		return 0
	}
	return usage - inactiveFile
}

// RootfsUsage is what a container's writable layer holds, as its
// snapshotter counts it.
func (r *Runtime) RootfsUsage(ctx context.Context, id string) (DiskUsage, error) {
	ctx = namespaces.WithNamespace(ctx, r.ns)
	info, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return DiskUsage{}, err
	}
	u, err := r.client.SnapshotService(info.Snapshotter).Usage(ctx, info.SnapshotKey)
	if err != nil {
		return DiskUsage{}, err
	}
	return DiskUsage{Bytes: uint64(u.Size), Inodes: uint64(u.Inodes)}, nil
}

// PodNetworkStats reads the interfaces of a pod's network namespace; a pod
// on the host network has none of its own (nil).
func (r *Runtime) PodNetworkStats(uid string) ([]InterfaceStats, error) {
	s, err := r.Sandbox(uid)
	if err != nil {
		return nil, err
	}
	if s.HostNetwork || s.NetNSPath == "" {
		return nil, nil
	}
	var out []InterfaceStats
	err = cnins.WithNetNSPath(s.NetNSPath, func(cnins.NetNS) error {
		// thread-self: /proc/self/net is the main thread's namespace, not
		// the one this locked thread entered.
		out, err = ReadNetDev("/proc/thread-self/net/dev")
		return err
	})
	return out, err
}

// ReadNetDev parses a /proc/net/dev file, loopback left out.
func ReadNetDev(path string) ([]InterfaceStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseNetDev(f)
}

func parseNetDev(r io.Reader) ([]InterfaceStats, error) {
	var out []InterfaceStats
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, counters, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue // the two header lines
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(counters)
		if name == "lo" || len(f) < 16 {
			continue
		}
		n := make([]uint64, 16)
		for i := range n {
			n[i], _ = strconv.ParseUint(f[i], 10, 64)
		}
		out = append(out, InterfaceStats{
			Name:    name,
			RxBytes: n[0], RxPackets: n[1], RxErrors: n[2], RxDropped: n[3],
			TxBytes: n[8], TxPackets: n[9], TxErrors: n[10], TxDropped: n[11],
		})
	}
	return out, sc.Err()
}

// DirUsage walks a directory tree (logs, an emptyDir) and counts its bytes
// and inodes, as the kubelet's du does; errors of single entries (removed
// while walking) are skipped.
func DirUsage(dir string) (DiskUsage, error) {
	var u DiskUsage
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			if d == nil {
				return err
			}
			return nil
		}
		u.Inodes++
		if info, err := d.Info(); err == nil {
			// Blocks, as du counts: a sparse file takes less than its size.
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				u.Bytes += uint64(st.Blocks) * 512
			} else {
				u.Bytes += uint64(info.Size())
			}
		}
		return nil
	})
	return u, err
}

package server

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/hostlet/hostlet/runtime"
	"github.com/moby/sys/mountinfo"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// fsStat is a filesystem a cgroup uses: its device as cAdvisor names it,
// what the cgroup has on it, its size and inodes.
type fsStat struct {
	device             string
	usage, limit       uint64
	inodes, inodesFree uint64
}

// fsMetrics are cAdvisor's DiskUsageMetrics. The kubelet's cAdvisor has
// them for the root (the host's filesystems) only: its containerd handler
// reports no filesystem. hostlet knows a container's writable layer (the
// same measurement /stats/summary's rootfs has), so containers have them
// too, on the image filesystem's device (as cAdvisor's cri-o handler
// reports them): usage the layer's bytes, limit and inodes the
// filesystem's.
var fsMetrics = []*cadvisorMetric{
	fsGauge("container_fs_inodes_free", "Number of available Inodes", func(f fsStat) uint64 { return f.inodesFree }),
	fsGauge("container_fs_inodes_total", "Number of Inodes", func(f fsStat) uint64 { return f.inodes }),
	fsGauge("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.",
		func(f fsStat) uint64 { return f.limit }),
	fsGauge("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.",
		func(f fsStat) uint64 { return f.usage }),
}

func fsGauge(name, help string, field func(fsStat) uint64) *cadvisorMetric {
	return &cadvisorMetric{
		name: name, help: help, kind: prometheus.GaugeValue, extra: []string{"device"},
		values: func(s *cgroupSeries) []metricValue {
			out := make([]metricValue, 0, len(s.fs))
			for _, f := range s.fs {
				out = append(out, metricValue{float64(field(f)), []string{f.device}})
			}
			return out
		},
	}
}

// diskIOMetrics are those of cAdvisor's DiskIOMetrics that the cgroup
// counts on every kernel and I/O scheduler (bytes and operations, v1's
// *_recursive blkio files or v2's io.stat), the ones the standard
// dashboards read. The others (sectors, merges, service and wait times,
// queued I/O) come from v1's CFQ/BFQ debug files only; left out.
var diskIOMetrics = []*cadvisorMetric{
	ioCounter("container_fs_reads_bytes_total", "Cumulative count of bytes read", func(r runtime.CgroupIO) uint64 { return r.ReadBytes }),
	ioCounter("container_fs_reads_total", "Cumulative count of reads completed", func(r runtime.CgroupIO) uint64 { return r.Reads }),
	ioCounter("container_fs_writes_bytes_total", "Cumulative count of bytes written", func(r runtime.CgroupIO) uint64 { return r.WriteBytes }),
	ioCounter("container_fs_writes_total", "Cumulative count of writes completed", func(r runtime.CgroupIO) uint64 { return r.Writes }),
}

func ioCounter(name, help string, field func(runtime.CgroupIO) uint64) *cadvisorMetric {
	return &cadvisorMetric{
		name: name, help: help, kind: prometheus.CounterValue, extra: []string{"device"},
		values: func(s *cgroupSeries) []metricValue {
			out := make([]metricValue, 0, len(s.stats.IO))
			for _, d := range s.stats.IO {
				out = append(out, metricValue{float64(field(d)), []string{blockDevices.name("/sys", d.Major, d.Minor)}})
			}
			return out
		},
	}
}

// blockDevices names block devices by number, as cAdvisor's machine
// info: "/dev/<name>" of the disk, "" for loop, RAM and optical devices it
// does not list. Names are kept: a number names one device while it is
// there.
var blockDevices deviceNames

type deviceNames struct{ m sync.Map }

func (d *deviceNames) name(sys string, major, minor uint64) string {
	key := strconv.FormatUint(major, 10) + ":" + strconv.FormatUint(minor, 10)
	if v, ok := d.m.Load(key); ok {
		return v.(string)
	}
	link, err := os.Readlink(filepath.Join(sys, "dev", "block", key))
	if err != nil {
		return "" // gone: not kept
	}
	name := filepath.Base(link)
	for _, p := range []string{"loop", "ram", "sr"} {
		if strings.HasPrefix(name, p) {
			name = ""
		}
	}
	if name != "" {
		name = "/dev/" + name
	}
	d.m.Store(key, name)
	return name
}

// filesystems are the filesystems dirs are on, each once: statfs for the
// size, the mount table for the device's name.
func filesystems(dirs ...string) []fsStat {
	var out []fsStat
	seen := map[uint64]bool{}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		var st unix.Stat_t
		var sfs unix.Statfs_t
		if unix.Stat(dir, &st) != nil || unix.Statfs(dir, &sfs) != nil || seen[st.Dev] {
			continue
		}
		seen[st.Dev] = true
		bsize := uint64(sfs.Bsize)
		out = append(out, fsStat{
			device: deviceOf(unix.Major(st.Dev), unix.Minor(st.Dev)),
			usage:  (sfs.Blocks - sfs.Bfree) * bsize, limit: sfs.Blocks * bsize,
			inodes: sfs.Files, inodesFree: sfs.Ffree,
		})
	}
	return out
}

// deviceOf is cAdvisor's name of the filesystem on a device: the mount's
// source where it is a device node, else the source with the device's
// numbers (overlay_0-42), as cAdvisor names overlay and tmpfs mounts.
func deviceOf(major, minor uint32) string {
	ms, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return i.Major != int(major) || i.Minor != int(minor), false
	})
	if err != nil || len(ms) == 0 {
		return strconv.Itoa(int(major)) + ":" + strconv.Itoa(int(minor))
	}
	if src := ms[0].Source; strings.HasPrefix(src, "/dev/") {
		return src
	}
	return ms[0].Source + "_" + strconv.Itoa(int(major)) + "-" + strconv.Itoa(int(minor))
}

// imageFsDir is containerd's snapshotter root, asked until containerd
// answers once (it does not move).
type imageFsDir struct {
	mu  sync.Mutex
	dir string
}

func (d *imageFsDir) get(ctx context.Context, cg Cgroups) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dir == "" {
		d.dir, _ = cg.ImageFsDir(ctx)
	}
	return d.dir
}

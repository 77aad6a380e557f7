package node

import (
	"context"
	"fmt"

	"github.com/hostlet/hostlet/runtime"
	"golang.org/x/sys/unix"
)

// Observe reads the eviction signals as the kubelet's eviction manager
// makes its observations: memory.available is capacity less the working
// set of the root cgroup (page cache the kernel cannot drop counts), the
// filesystems' free bytes and inodes from statfs, pid.available from the
// kernel's limit less the running processes.
func (n *Node) Observe(ctx context.Context) Observations {
	obs := Observations{}
	if mem, err := hostMemory(); err == nil {
		obs[SignalMemoryAvailable] = Observation{Available: int64(*mem.AvailableBytes), Capacity: int64(*mem.AvailableBytes + *mem.WorkingSetBytes)}
	}
	if o, ok := n.allocatableMemory(); ok {
		obs[SignalAllocatableMemoryAvailable] = o
	}
	fsObserve(obs, n.cfg.RootDir, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if dir := n.imageFsDir(ctx, true); dir != "" {
		fsObserve(obs, dir, SignalImageFsAvailable, SignalImageFsInodesFree)
	}
	maxPID := readInt("/proc/sys/kernel/pid_max")
	if tm := readInt("/proc/sys/kernel/threads-max"); tm > 0 && tm < maxPID {
		maxPID = tm
	}
	var info unix.Sysinfo_t
	if maxPID > 0 && unix.Sysinfo(&info) == nil {
		obs[SignalPIDAvailable] = Observation{Available: maxPID - int64(info.Procs), Capacity: maxPID}
	}
	return obs
}

// podsMemory reads the pods' cgroup (runtime.Runtime with
// --cgroups-per-qos).
type podsMemory interface {
	PodsCgroupMemory() (runtime.CgroupMemory, error)
}

// allocatableMemory is the kubelet's allocatableMemory.available: the pods'
// cgroup limit (node allocatable: capacity less the reserved) less its
// working set, usage less inactive file pages on v1 (total_inactive_file)
// and v2 (memory.current less inactive_file) alike.
func (n *Node) allocatableMemory() (Observation, bool) {
	pm, ok := n.rt.(podsMemory)
	if !ok {
		return Observation{}, false
	}
	m, err := pm.PodsCgroupMemory()
	if err != nil || m.Limit == 0 {
		return Observation{}, false
	}
	avail := int64(m.Limit) - int64(m.WorkingSet)
	return Observation{Available: max(avail, 0), Capacity: int64(m.Limit)}, true
}

// fsObserve adds a filesystem's free bytes and inodes.
func fsObserve(obs Observations, dir, bytesSignal, inodesSignal string) {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return
	}
	obs[bytesSignal] = Observation{Available: int64(fs.Bavail) * fs.Bsize, Capacity: int64(fs.Blocks) * fs.Bsize}
	if fs.Files > 0 {
		obs[inodesSignal] = Observation{Available: int64(fs.Ffree), Capacity: int64(fs.Files)}
	}
}

// HasDedicatedImageFs reports whether containerd's images live on another
// filesystem than the root dir, as the kubelet asks cAdvisor: node-level
// reclaim then frees images only under imagefs pressure.
func (n *Node) HasDedicatedImageFs(ctx context.Context) (bool, error) {
	dir := n.imageFsDir(ctx, true)
	if dir == "" {
		return false, fmt.Errorf("image filesystem not known yet")
	}
	var root, images unix.Stat_t
	if err := unix.Stat(n.cfg.RootDir, &root); err != nil {
		return false, err
	}
	if err := unix.Stat(dir, &images); err != nil {
		return false, err
	}
	return root.Dev != images.Dev, nil
}

package node

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// Observe reads the eviction signals as the kubelet's eviction manager
// makes its observations: memory.available is capacity less the working
// set of the root cgroup (page cache the kernel cannot drop counts), the
// filesystems' free bytes and inodes from statfs, pid.available from the
// kernel's limit less the running processes.
func (n *Node) Observe(ctx context.Context) Observations {
	return n.observe(ctx, true)
}

// observe is Observe asking containerd for the image filesystem only if
// runtimeUp.
func (n *Node) observe(ctx context.Context, runtimeUp bool) Observations {
	obs := Observations{}
	if mem, err := hostMemory(); err == nil {
		obs[SignalMemoryAvailable] = Observation{Available: int64(*mem.AvailableBytes), Capacity: int64(*mem.AvailableBytes + *mem.WorkingSetBytes)}
	}
	fsObserve(obs, n.cfg.RootDir, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if dir := n.imageFsDir(ctx, runtimeUp); dir != "" {
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

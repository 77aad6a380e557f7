package volumemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// emptyDir is the kubelet's emptyDir plugin (kubernetes.io/empty-dir): a
// directory of the pod's own, on the node's disk or a tmpfs
// (medium: Memory) sized as the kubelet sizes it.
type emptyDir struct{}

func (emptyDir) Name() string { return "kubernetes.io/empty-dir" }

func (emptyDir) CanSupport(s *Spec) bool { return s.Claim == nil && s.Volume.EmptyDir != nil }

func (emptyDir) SetUp(_ context.Context, m *Manager, pod *v1.Pod, s *Spec, _ ContentFunc) error {
	dir := m.VolumeDir(pod, s.Volume.Name)
	if _, err := os.Stat(dir); err == nil {
		// Set up already: its contents are the pod's own.
		return nil
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	// emptyDir is world-writable, as the kubelet makes it (setupDir),
	// before a tmpfs goes on it: the tmpfs root is 1777, sticky as the
	// kubelet's (a subPath made in it, which copies the root's mode,
	// is too).
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	src := s.Volume.EmptyDir
	if src.Medium == v1.StorageMediumMemory {
		opts := "mode=1777"
		if size := m.memoryVolumeSize(pod, src.SizeLimit); size > 0 {
			opts += fmt.Sprintf(",size=%d", size)
		}
		if err := ensureTmpfs(dir, opts); err != nil {
			return err
		}
	}
	return applyFSGroup(dir, FSGroup(pod), false)
}

func (emptyDir) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	return m.VolumeDir(pod, s.Volume.Name), false
}

// LocalEphemeral: on the node's disk, not in memory.
func (emptyDir) LocalEphemeral(v *v1.Volume) bool {
	return v.EmptyDir.Medium == v1.StorageMediumDefault
}
func (emptyDir) HasStats() bool { return true }

// memoryVolumeSize is the size of a memory-backed emptyDir as the kubelet
// computes it: the smallest of node allocatable memory, the pod's memory
// limit (when every container has one) and the volume's sizeLimit.
func (m *Manager) memoryVolumeSize(pod *v1.Pod, sizeLimit *resource.Quantity) int64 {
	size := int64(0)
	if q, ok := m.cfg.Allocatable()[v1.ResourceMemory]; ok {
		size = q.Value()
	}
	smaller := func(v int64) {
		if v > 0 && (size == 0 || v <= size) {
			size = v
		}
	}
	if l, ok := podMemoryLimit(pod); ok {
		smaller(l)
	}
	if sizeLimit != nil {
		smaller(sizeLimit.Value())
	}
	return size
}

// podMemoryLimit is the pod's memory limit: the sum over its containers, at
// least the largest init container's, and none if any container lacks one.
func podMemoryLimit(pod *v1.Pod) (int64, bool) {
	var sum int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return 0, false
		}
		sum += q.Value()
	}
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return 0, false
		}
		sum = max(sum, q.Value())
	}
	return sum, true
}

func ensureTmpfs(dir, opts string) error {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return err
	}
	if st.Dev != parent.Dev {
		return nil // already a mount point
	}
	return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

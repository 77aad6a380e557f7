package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hostlet/hostlet/provider/pluginwatcher"
	"github.com/hostlet/hostlet/provider/volumes"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// UseDriver takes a driver's registration as found in the plugin registry
// by `hostlet leave`, for TearDownAll: its endpoint only, no NodeGetInfo
// and no CSINode entry, as the Node is gone.
func (m *Manager) UseDriver(p pluginwatcher.Plugin) error {
	if err := supportedVersion(p.Versions); err != nil {
		return fmt.Errorf("driver %s: %w", p.Name, err)
	}
	endpoint := strings.TrimPrefix(p.Endpoint, "unix://")
	if !filepath.IsAbs(endpoint) {
		return fmt.Errorf("driver %s: endpoint %q is not an absolute path", p.Name, p.Endpoint)
	}
	m.mu.Lock()
	m.drivers[p.Name] = driver{endpoint: endpoint, socket: p.Socket}
	m.mu.Unlock()
	return nil
}

// TearDownAll has the drivers unpublish and unstage every CSI volume still
// on the node, as the kubelet's volume manager does for a drained node's
// pods: each pod's volumes (block ones too) from their vol_data.json, then
// the staged volumes no pod publishes any more (an unstage a restart or a
// failure cut short). `hostlet leave` runs it before the pods' containers
// are killed, as a driver's node plugin may be one of them. Each volume
// that could not be torn down is an error naming it and its driver; its
// directories stay.
func (m *Manager) TearDownAll(ctx context.Context) error {
	var errs []error
	pods, err := os.ReadDir(m.layout.PodsDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, p := range pods {
		if err := m.TearDownPod(ctx, types.UID(p.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	staged, err := m.stagedVolumes()
	if err != nil {
		errs = append(errs, err)
	}
	for _, dir := range staged {
		if err := m.unstageLeft(ctx, dir); err != nil {
			errs = append(errs, fmt.Errorf("UnmountDevice failed for the volume staged in %s: %w", dir, err))
		}
	}
	for _, d := range m.stagedBlockVolumes() {
		if err := m.unmapDeviceLeft(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("UnmapDevice failed for block volume %s: %w", d.blockPV, namingDriver(err, d)))
		}
	}
	return errors.Join(errs...)
}

// stagedVolumes are the directories of staged filesystem volumes
// (<plugins>/kubernetes.io/csi/<driver>/<hash>, with vol_data.json).
func (m *Manager) stagedVolumes() ([]string, error) {
	base := m.layout.PluginDir(PluginName)
	drivers, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, d := range drivers {
		// Block volumes are listed by stagedBlockVolumes.
		if !d.IsDir() || d.Name() == filepath.Base(blockDir(m.layout)) {
			continue
		}
		vols, _ := os.ReadDir(filepath.Join(base, d.Name()))
		for _, v := range vols {
			dir := filepath.Join(base, d.Name(), v.Name())
			if _, err := os.Stat(filepath.Join(dir, volDataFile)); err == nil {
				dirs = append(dirs, dir)
			}
		}
	}
	return dirs, nil
}

// unstageLeft unstages the volume staged in dir unless a pod still
// publishes it.
func (m *Manager) unstageLeft(ctx context.Context, dir string) error {
	d, err := readVolData(dir)
	if err != nil {
		return err
	}
	return namingDriver(m.unstageOne(ctx, "", d), d)
}

// ForceTearDownAll is `hostlet leave --force`, for volumes whose driver is
// gone for good, done as kubeadm reset does with the kubelet's directory:
// every CSI mount still below the root dir (pods' published volumes, block
// volumes' binds and publish files, staging mounts) is unmounted, deepest
// first, without the driver, and the CSI directories are then removed so
// that the pods' cleanup finds nothing left to ask a driver for. A
// directory is removed only once nothing is mounted below it. What the
// driver holds outside the root dir (a loop device, an attached disk, a
// remote session) is not hostlet's to know and stays; the unmounted
// mount points are returned to be logged.
func (m *Manager) ForceTearDownAll() ([]string, error) {
	mounts, err := m.layout.MountsBelow()
	if err != nil {
		return nil, err
	}
	dirs := m.csiDirs()
	var points []string
	for _, p := range mounts {
		if under(p, dirs) {
			points = append(points, p)
		}
	}
	// Reverse order: a mount below another goes before it, and pods/
	// (published) before plugins/ (staged), as a driver would.
	slices.SortFunc(points, func(a, b string) int { return strings.Compare(b, a) })
	var unmounted []string
	for _, p := range points {
		if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			// Busy (a process the driver left): detached, as the mount
			// point's files are no longer reachable through the root dir.
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				return unmounted, fmt.Errorf("unmounting %s: %w", p, err)
			}
		}
		unmounted = append(unmounted, p)
	}
	mounts, err = m.layout.MountsBelow()
	if err != nil {
		return unmounted, err
	}
	for _, d := range dirs {
		for _, p := range mounts {
			if under(p, []string{d}) {
				return unmounted, fmt.Errorf("still mounted below %s, not removed: %s", d, p)
			}
		}
		if err := os.RemoveAll(d); err != nil {
			return unmounted, err
		}
	}
	return unmounted, nil
}

// csiDirs are the directories of CSI volumes under the root dir: the
// plugin's own (staging, block volumes) and each pod's CSI volumes and
// block device links; each as the mount table names it (symlinks in the
// root dir's own path resolved, as MountsBelow does), those that do not
// exist left out. Below the root dir no link is followed: a directory
// that is a symlink is not one of them, so the removal never reaches
// through it.
func (m *Manager) csiDirs() []string {
	root, err := filepath.EvalSymlinks(m.cfg.RootDir)
	if err != nil {
		return nil
	}
	l := volumes.NewLayout(root)
	all := []string{l.PluginDir(PluginName)}
	pods, _ := os.ReadDir(l.PodsDir())
	for _, p := range pods {
		uid := types.UID(p.Name())
		all = append(all, filepath.Dir(VolumeDir(l, uid, "x")), filepath.Dir(BlockLink(l, uid, "x")))
	}
	var dirs []string
	for _, d := range all {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// under says whether path is one of dirs or below one.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

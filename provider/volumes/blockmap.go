package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// BlockDevice is the block device a block PV's path names, its symlinks
// evaluated as the kubelet's EvalHostSymlinks does (a local PV's path is
// often a /dev/disk/by-id link): an error says why it cannot be mapped.
func BlockDevice(path string) (string, error) {
	dev, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(dev)
	if err != nil {
		return "", err
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return "", fmt.Errorf("%s is not a block device", path)
	}
	return dev, nil
}

// MapBlock maps the block device dev (from BlockDevice) of PV pv, of the
// volume plugin with that qualified name, for pod uid as the kubelet's
// MapBlockVolume does: bind-mounted on <global map path>/<uid>, then
// symlinked from the pod's device map path. It returns the symlink, which
// the pod's containers get as their device; mapping again is a no-op.
//
// The kubelet also sets a loop device over the bind mount to hold the
// device open; hostlet does not (see TearDownBlock): a device removed
// under a running pod is that pod's to notice.
func (l Layout) MapBlock(plugin, pv, dev string, uid types.UID) (string, error) {
	return MapDevice(l.GlobalMapPath(plugin, pv), filepath.Join(l.PodDeviceMapPath(uid, plugin), pv), dev, uid)
}

// MapDevice is the kubelet's MapBlockVolume with the paths given (a
// plugin with paths of its own, CSI, says where): dev bind-mounted on
// <global>/<uid>, link a symlink to dev. Mapping again is a no-op.
func MapDevice(global, link, dev string, uid types.UID) (string, error) {
	if err := os.MkdirAll(global, 0o750); err != nil {
		return "", err
	}
	file := filepath.Join(global, string(uid))
	fi, err := os.Lstat(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o750)
		if err != nil {
			return "", err
		}
		f.Close()
		fallthrough
	case err == nil && fi.Mode()&os.ModeDevice == 0:
		if err := unix.Mount(dev, file, "", unix.MS_BIND, ""); err != nil {
			return "", fmt.Errorf("failed to bind mount devicePath: %s to linkPath %s: %w", dev, file, err)
		}
	case err != nil:
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return "", err
	}
	// Volumes are set up again on every resync: a link already right is
	// left alone, never missing while a container is being created.
	if target, err := os.Readlink(link); err == nil && target == dev {
		return link, nil
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return link, os.Symlink(dev, link)
}

// TearDownBlock unmaps every block volume of pod uid, found on disk (so a
// restarted hostlet finds them too), as the kubelet's UnmapBlockVolume
// and UnmapDevice: the bind mounts under any plugin's global map paths
// unmounted and removed, a global map path no pod uses any more removed,
// then the pod's symlinks. It reports whether there was anything.
func (l Layout) TearDownBlock(uid types.UID) (bool, error) {
	files, err := filepath.Glob(filepath.Join(l.root, "plugins", "*", volumeDevicesDir, "*", string(uid)))
	if err != nil {
		return false, err
	}
	// iSCSI's global map paths are its own, a level deeper, under an
	// unescaped plugin name (plugins/kubernetes.io/iscsi/volumeDevices/
	// iface-<iface>/<portal>-<iqn>-lun-<lun>), as the kubelet's.
	deeper, err := filepath.Glob(filepath.Join(l.root, "plugins", "*", "*", volumeDevicesDir, "iface-*", "*", string(uid)))
	if err != nil {
		return false, err
	}
	files = append(files, deeper...)
	var errs []error
	for _, file := range files {
		if fi, err := os.Lstat(file); err == nil && fi.Mode()&os.ModeDevice != 0 {
			if err := unix.Unmount(file, 0); err != nil && !errors.Is(err, unix.EINVAL) {
				errs = append(errs, fmt.Errorf("failed to unmount linkPath %s: %w", file, err))
				continue
			}
		}
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		// The map path goes with its last pod (the kubelet's
		// RemoveMapPath once no bind mount refers to it).
		_ = os.Remove(filepath.Dir(file))
	}
	if err := errors.Join(errs...); err != nil {
		return true, err
	}
	dir := l.PodVolumeDevicesDir(uid)
	_, statErr := os.Lstat(dir)
	if err := os.RemoveAll(dir); err != nil {
		return true, err
	}
	return len(files) > 0 || statErr == nil, nil
}

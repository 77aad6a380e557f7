package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// local is the kubelet's local volume plugin (kubernetes.io/local-volume):
// a local PV's path, a directory the cluster's admin made, bind-mounted
// into the pod's volume directory with the PV's mount options (named by
// the PV, as the kubelet names it); a block device PV's path mapped for
// volumeDevices.
type local struct{}

func (local) Name() string { return "kubernetes.io/local-volume" }

func (local) CanSupport(s *Spec) bool { return s.PV() != nil && s.PV().Spec.Local != nil }

// CheckMount is the kubelet's check of the PV's path at NewMounter.
func (local) CheckMount(s *Spec) error {
	if err := localPathType(s.PV().Spec.Local.Path); err != nil {
		return claimFailure("MountVolume.NewMounter initialization failed", s.PV(), err)
	}
	return nil
}

// SetUp binds the PV's path once. The volume's owner is set only by its
// first pod on the node, as the kubelet's local volume does: another
// pod's may not be changed under it.
func (p local) SetUp(_ context.Context, m *Manager, pod *v1.Pod, s *Spec, _ ContentFunc) error {
	pv := s.PV()
	flags, err := bindFlags(volumes.MountOptions(pv), s.Claim.ReadOnly)
	if err != nil {
		return claimFailure("MountVolume.SetUp failed", pv, err)
	}
	dir, _ := p.Path(m, pod, s)
	made, err := bindOnce(pv.Spec.Local.Path, dir, flags)
	if err != nil {
		return claimFailure("MountVolume.SetUp failed", pv, err)
	}
	if made && flags&unix.MS_RDONLY == 0 && s.First {
		if err := applyFSGroupPolicy(dir, pod, false); err != nil {
			return claimFailure("MountVolume.SetUp failed", pv, err)
		}
	}
	return nil
}

func (p local) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	return m.layout.PodVolumeDir(pod.UID, p.Name(), s.PV().Name), false
}

// MapDevice links the pod to the PV's block device at the kubelet's map
// paths.
func (p local) MapDevice(_ context.Context, m *Manager, pod *v1.Pod, s *Spec) error {
	pv := s.PV()
	dev, err := volumes.BlockDevice(pv.Spec.Local.Path)
	if err != nil {
		return mapFailure("MapVolume.EvalHostSymlinks failed", pv, err)
	}
	if _, err := m.layout.MapBlock(p.Name(), pv.Name, dev, pod.UID); err != nil {
		return mapFailure("MapVolume.MapBlockVolume failed", pv, err)
	}
	return nil
}

func (local) LocalEphemeral(*v1.Volume) bool { return false }
func (local) HasStats() bool                 { return false }
func (local) statFS()                        {}

// localPathType is the kubelet's check of a local PV's path (its
// getGlobalLocalPath): a directory that exists. A block device, which the
// kubelet formats and mounts for a Filesystem PV, is not supported.
func localPathType(path string) error {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return fmt.Errorf("path %q does not exist", path)
	}
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return nil
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		return fmt.Errorf("local volume %q is a block device, which hostlet does not support", path)
	}
	return errors.New("only directory and block device are supported")
}

// mountFlags are the mount options a local PV's bind mount can carry.
var mountFlags = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
	"strictatime": unix.MS_STRICTATIME, "sync": unix.MS_SYNCHRONOUS, "dirsync": unix.MS_DIRSYNC,
	"rw": 0, "suid": 0, "dev": 0, "exec": 0, "async": 0, "defaults": 0, "bind": 0,
}

// bindFlags are the flags of a local PV's bind mount: read-only when the
// pod's volume source says so, and the PV's mount options, which are flags
// for a bind mount (anything else is refused, not dropped).
func bindFlags(opts []string, readOnly bool) (uintptr, error) {
	var flags uintptr
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	for _, o := range opts {
		f, ok := mountFlags[o]
		if !ok {
			return 0, fmt.Errorf("mount option %q is not supported by hostlet for a local volume", o)
		}
		flags |= f
	}
	return flags, nil
}

// bindOnce bind-mounts src on dir with flags unless dir is a mount point
// already (set up before, also by a hostlet before a restart); made says
// it mounted now.
func bindOnce(src, dir string, flags uintptr) (made bool, err error) {
	if ok, err := mountinfo.Mounted(dir); err == nil && ok {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return false, err
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		return false, &os.PathError{Op: "bind mount", Path: src, Err: err}
	}
	if flags != 0 {
		// A bind mount takes its flags from a remount of it.
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
			unmountAll(dir)
			return false, &os.PathError{Op: "remount", Path: dir, Err: err}
		}
	}
	return true, nil
}

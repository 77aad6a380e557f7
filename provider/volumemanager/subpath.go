package volumemanager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// A subPath names a path inside a volume that the pod itself can write: an
// init container may have turned any component into a symlink to a host
// path (CVE-2017-1002101, CVE-2021-25741). So, as the kubelet's
// pkg/volume/util/subpath does, the path is opened component by component
// beneath the volume root, never leaving it, and the opened file descriptor
// (not the path) is bind-mounted onto a per-pod path that the pod cannot
// touch. The runtime gets that path.

// errSubPathEscape: the subPath leads out of its volume.
var errSubPathEscape = errors.New("subpath leads out of the volume")

// openat2Missing is set once the kernel showed it has no openat2 (before
// 5.6, or filtered by seccomp); filepath-securejoin emulates it then.
var openat2Missing atomic.Bool

// lookupBeneath opens rel below the directory root (an O_PATH handle is
// returned), following symlinks only while they stay beneath root.
func lookupBeneath(root *os.File, rel string) (*os.File, error) {
	if !openat2Missing.Load() {
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
		for range 16 {
			fd, err := unix.Openat2(int(root.Fd()), rel, how)
			if err == unix.EAGAIN || err == unix.EINTR {
				continue // a rename raced the lookup
			}
			if err == unix.EXDEV {
				return nil, errSubPathEscape
			}
			if err == unix.ENOSYS {
				openat2Missing.Store(true)
				break
			}
			if err != nil {
				return nil, &os.PathError{Op: "openat2", Path: rel, Err: err}
			}
			return os.NewFile(uintptr(fd), filepath.Join(root.Name(), rel)), nil
		}
		if !openat2Missing.Load() {
			return nil, &os.PathError{Op: "openat2", Path: rel, Err: unix.EAGAIN}
		}
	}
	// The emulation scopes links to root (as chroot would) instead of
	// refusing them: never outside either way.
	return pathrs.OpenatInRoot(root, rel)
}

// openSubPath opens sub beneath the volume directory volPath. A missing
// path is created as directories with the volume root's mode, as the
// kubelet's SafeMakeDir does: each one made with mkdirat in its opened
// parent and entered without following symlinks.
func openSubPath(volPath, sub string) (*os.File, error) {
	root, err := os.OpenFile(volPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sub = filepath.Clean(sub)
	if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
		return nil, errSubPathEscape
	}
	f, err := lookupBeneath(root, sub)
	if !errors.Is(err, unix.ENOENT) {
		return f, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &st); err != nil {
		return nil, err
	}
	if err := makeDirsBeneath(root, sub, st.Mode&0o7777); err != nil {
		return nil, mkdirError{err}
	}
	return lookupBeneath(root, sub)
}

// makeDirsBeneath creates the missing directories of rel below root.
func makeDirsBeneath(root *os.File, rel string, mode uint32) error {
	parts := strings.Split(rel, "/")
	parent, err := lookupBeneath(root, ".")
	if err != nil {
		return err
	}
	defer func() { parent.Close() }()
	for i, name := range parts {
		cur, err := lookupBeneath(root, strings.Join(parts[:i+1], "/"))
		if err == nil {
			parent.Close()
			parent = cur
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		// Also ENOENT for a dangling symlink: mkdirat then fails with EEXIST
		// and nothing is made where the link points.
		if err := unix.Mkdirat(int(parent.Fd()), name, 0o700); err != nil {
			return &os.PathError{Op: "mkdirat", Path: name, Err: err}
		}
		fd, err := unix.Openat(int(parent.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "openat", Path: name, Err: err}
		}
		// mkdirat obeys the umask and drops setgid: set the mode exactly.
		if err := unix.Fchmod(fd, mode); err != nil {
			unix.Close(fd)
			return err
		}
		parent.Close()
		parent = os.NewFile(uintptr(fd), name)
	}
	return nil
}

// bindSubPath bind-mounts the opened file f onto target, made a directory
// or an empty file to match. Whatever was mounted there goes first.
func bindSubPath(f *os.File, target string) error {
	unmountAll(target)
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(target, 0o750); err != nil {
			return err
		}
	} else {
		t, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_RDONLY|unix.O_NOFOLLOW, 0o640)
		if err != nil {
			return err
		}
		t.Close()
	}
	// The kernel follows the descriptor's magic link to the very file that
	// was opened; renaming or relinking anything in the volume no longer
	// matters.
	src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind mount", Path: target, Err: err}
	}
	return nil
}

// unmountAll lazily unmounts everything stacked on path.
func unmountAll(path string) {
	for range 100 {
		if err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			return
		}
	}
}

// PrepareSubPath makes the host path the runtime mounts for container's
// volumeMount number idx, m, with subPath sub of the volume at volPath: the
// subPath opened beneath the volume and bound at
// <pod dir>/volume-subpaths/<volume>/<container>/<mount index>. Errors
// carry the kubelet's messages; what exactly failed is logged only, as it
// may tell about the host's file system.
func (m *Manager) PrepareSubPath(pod *v1.Pod, container string, idx int, vm v1.VolumeMount, volPath, sub string) (string, error) {
	l := log.WithFields(log.Fields{"pod": pod.Namespace + "/" + pod.Name, "container": container, "volumeMount": vm.Name, "subPath": sub})
	f, err := openSubPath(volPath, sub)
	if err != nil {
		l.WithError(err).Warn("refusing subPath")
		if errors.As(err, new(mkdirError)) {
			return "", fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", vm.Name, container)
		}
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, container)
	}
	defer f.Close()
	target := m.layout.SubPathTarget(pod.UID, vm.Name, container, idx)
	if err := bindSubPath(f, target); err != nil {
		l.WithError(err).Warn("binding subPath")
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, container)
	}
	return target, nil
}

// mkdirError: creating the missing directories of a subPath failed.
type mkdirError struct{ error }

func (e mkdirError) Unwrap() error { return e.error }

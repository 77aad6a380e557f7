package volumemanager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// createHostPath makes a missing hostPath (DirectoryOrCreate or
// FileOrCreate). The part of the path that exists is the one the pod's
// author named and resolves as usual; what is missing is made one
// component at a time in its opened parent and never through a symlink, so
// a dangling link planted by another pod cannot make hostlet create a file
// or directory where it points.
func createHostPath(path string, dir bool) error {
	path = filepath.Clean(path)
	if !filepath.IsAbs(path) {
		return fmt.Errorf("hostPath %q is not absolute", path)
	}
	missing := []string{filepath.Base(path)}
	parentPath := filepath.Dir(path)
	var parent int
	for {
		fd, err := unix.Open(parentPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			parent = fd
			break
		}
		if err != unix.ENOENT || parentPath == "/" {
			return &os.PathError{Op: "open", Path: parentPath, Err: err}
		}
		missing = append([]string{filepath.Base(parentPath)}, missing...)
		parentPath = filepath.Dir(parentPath)
	}
	defer func() { unix.Close(parent) }()
	for i, name := range missing {
		if i == len(missing)-1 && !dir {
			fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				return unix.Close(fd)
			}
			if err == unix.EEXIST && isKind(parent, name, unix.S_IFREG) {
				return nil // made meanwhile
			}
			return &os.PathError{Op: "create", Path: path, Err: err}
		}
		err := unix.Mkdirat(parent, name, 0o755)
		if err == unix.EEXIST && !isKind(parent, name, unix.S_IFDIR) {
			return &os.PathError{Op: "mkdir", Path: path, Err: errors.New("a component exists and is not a directory")}
		}
		if err != nil && err != unix.EEXIST {
			return &os.PathError{Op: "mkdir", Path: path, Err: err}
		}
		fd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		unix.Close(parent)
		parent = fd
	}
	return nil
}

// isKind: name in dir exists, is no symlink, and has file type kind.
func isKind(dir int, name string, kind uint32) bool {
	var st unix.Stat_t
	return unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == kind
}

// unmountUnder lazily unmounts everything mounted at or below dir, deepest
// first, and fails if anything is left.
func unmountUnder(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for range 3 {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
		for _, m := range mounts {
			unmountAll(m.Mountpoint)
		}
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
	if err == nil && len(mounts) > 0 {
		err = fmt.Errorf("still mounted: %s", mounts[0].Mountpoint)
	}
	return err
}

package volumemanager

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

// Masks the kubelet applies when it gives a volume to the pod's fsGroup.
const (
	rwMask   = os.FileMode(0o660)
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

// applyFSGroup makes a volume's files group-owned by fsGroup with group
// access, and its directories setgid so new files inherit the group, as the
// kubelet's volume ownership management does.
func applyFSGroup(dir string, fsGroup *int64, readOnly bool) error {
	if fsGroup == nil {
		return nil
	}
	gid := int(*fsGroup)
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, gid); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil || info.Mode()&os.ModeSymlink != 0 {
			return err
		}
		mask := rwMask
		if readOnly {
			mask = roMask
		}
		if info.IsDir() {
			mask |= os.ModeSetgid | execMask
		}
		return os.Chmod(path, info.Mode()|mask)
	})
}

// applyFSGroupPolicy is applyFSGroup under the pod's fsGroupChangePolicy,
// as the kubelet applies it to the volumes whose data outlives the pod
// (local, CSI): OnRootMismatch skips the walk, which takes minutes on a
// volume of millions of files, when the volume's root already has what
// the walk would give it (skipPermissionChange).
func applyFSGroupPolicy(dir string, pod *v1.Pod, readOnly bool) error {
	fsGroup := FSGroup(pod)
	if fsGroup == nil {
		return nil
	}
	if p := fsGroupChangePolicy(pod); p != nil && *p == v1.FSGroupChangeOnRootMismatch && !rootMismatch(dir, *fsGroup, readOnly) {
		log.WithFields(log.Fields{"pod": pod.Namespace + "/" + pod.Name, "path": dir}).Debug("skipping permission and ownership change for volume: its root matches (OnRootMismatch)")
		return nil
	}
	return applyFSGroup(dir, fsGroup, readOnly)
}

func fsGroupChangePolicy(pod *v1.Pod) *v1.PodFSGroupChangePolicy {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroupChangePolicy
	}
	return nil
}

// rootMismatch is the kubelet's requiresPermissionChange: the root is not
// a directory of group fsGroup whose permissions include the group's
// (read-write or read-only, and search) with setgid, or cannot be read.
func rootMismatch(root string, fsGroup int64, readOnly bool) bool {
	fi, err := os.Stat(root)
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != fsGroup || !fi.IsDir() {
		return true
	}
	want := rwMask
	if readOnly {
		want = roMask
	}
	want |= execMask
	return fi.Mode().Perm()&want != want || fi.Mode()&os.ModeSetgid == 0
}

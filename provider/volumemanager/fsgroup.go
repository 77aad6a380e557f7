package volumemanager

import (
	"io/fs"
	"os"
	"path/filepath"
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

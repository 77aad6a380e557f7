package volumes

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// MakeShared makes the root dir a shared mount, as the kubelet's
// setupDataDirs does (MakeRShared) before anything is mounted below it: a
// mount a CSI node plugin makes through a Bidirectional mount of the pods
// or plugins directory then reaches the host and the other pods, and a
// pod's HostToContainer mount of it sees the volumes mounted later. On a
// shared mount already (systemd makes / shared) nothing changes.
//
// Where the kubelet binds the root dir onto itself non-recursively, the
// bind here is recursive and a root dir that is a mount point of its own
// is made shared in place: a hostlet upgraded on a node with running pods
// finds their volumes mounted below the root dir, which a plain bind would
// hide from it (it could neither refresh nor unmount them), and a bind
// over a mount point would need two unmounts where its owner does one.
func (l Layout) MakeShared() error {
	root, err := filepath.EvalSymlinks(l.root)
	if err != nil {
		return err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(root))
	if err != nil {
		return fmt.Errorf("the mounts of %s: %w", root, err)
	}
	switch action := sharedAction(root, mounts); action {
	case alreadyShared:
		return nil
	case bindShared:
		if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", root, err)
		}
		fallthrough
	default:
		if err := unix.Mount("", root, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("making %s rshared: %w", root, err)
		}
		log.WithFields(log.Fields{"dir": root, "bound": action == bindShared}).Info("root dir made a shared mount")
	}
	return nil
}

type sharedStep int

const (
	alreadyShared sharedStep = iota
	makeShared               // the root dir is a mount point: make it rshared
	bindShared               // bind it onto itself, then make that rshared
)

// sharedAction is what makes root shared, given the mounts at and above
// it: the one it is on is the longest mount point (the last one, if
// several are stacked there).
func sharedAction(root string, mounts []*mountinfo.Info) sharedStep {
	var on *mountinfo.Info
	for _, m := range mounts {
		if on == nil || len(m.Mountpoint) >= len(on.Mountpoint) {
			on = m
		}
	}
	if on != nil {
		for _, opt := range strings.Fields(on.Optional) {
			if strings.HasPrefix(opt, "shared:") {
				return alreadyShared
			}
		}
		if on.Mountpoint == root {
			return makeShared
		}
	}
	return bindShared
}

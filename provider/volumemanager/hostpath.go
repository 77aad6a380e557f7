package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hostlet/hostlet/provider/volumes"
	v1 "k8s.io/api/core/v1"
)

// hostPath is the kubelet's hostPath plugin (kubernetes.io/host-path), for
// inline hostPath volumes and hostPath PVs: the path itself, type-checked,
// is what containers mount (the PV's path is the one the cluster's admin
// gave, used as the kubelet uses it). It maps no block devices, as the
// kubelet's.
type hostPath struct{}

func (hostPath) Name() string { return "kubernetes.io/host-path" }

func (hostPath) CanSupport(s *Spec) bool { return source(s) != nil }

// source is the volume's hostPath source, inline or the PV's.
func source(s *Spec) *v1.HostPathVolumeSource {
	if pv := s.PV(); pv != nil {
		return pv.Spec.HostPath
	}
	return s.Volume.HostPath
}

// CheckMount: a hostPath PV takes no mount options.
func (hostPath) CheckMount(s *Spec) error {
	if len(volumes.MountOptions(s.PV())) > 0 {
		return claimFailure("MountVolume.MountOptionSupport check failed", s.PV(), errors.New("mount options are not supported for this volume type"))
	}
	return nil
}

func (hostPath) SetUp(_ context.Context, _ *Manager, _ *v1.Pod, s *Spec, _ ContentFunc) error {
	err := setupHostPath(source(s))
	if err != nil && s.PV() != nil {
		return claimFailure("MountVolume.SetUp failed", s.PV(), err)
	}
	return err
}

func (hostPath) Path(_ *Manager, _ *v1.Pod, s *Spec) (string, bool) { return source(s).Path, false }

func (hostPath) LocalEphemeral(*v1.Volume) bool { return false }
func (hostPath) HasStats() bool                 { return false }

// setupHostPath checks a hostPath volume's type as the kubelet's hostPath
// plugin does (checkTypeInternal): the *OrCreate types make a missing path
// and otherwise check what exists like their plain types; every other type
// names what the path (symlinks followed) must be. A failure keeps the pod
// Pending with a FailedMount event.
func setupHostPath(hp *v1.HostPathVolumeSource) error {
	t := v1.HostPathUnset
	if hp.Type != nil {
		t = *hp.Type
	}
	if t == v1.HostPathUnset {
		return nil
	}
	got, exists := hostPathFileType(hp.Path)
	switch t {
	case v1.HostPathDirectoryOrCreate:
		if !exists {
			return createHostPath(hp.Path, true)
		}
		t = v1.HostPathDirectory
	case v1.HostPathFileOrCreate:
		if !exists {
			return createHostPath(hp.Path, false)
		}
		t = v1.HostPathFile
	}
	what, known := hostPathTypeNames[t]
	if !known {
		return fmt.Errorf("%s is an invalid volume type", t)
	}
	if got != t {
		return fmt.Errorf("hostPath type check failed: %s is not %s", hp.Path, what)
	}
	return nil
}

// hostPathTypeNames are the kubelet's words for each checked type in its
// "hostPath type check failed: PATH is not ..." message.
var hostPathTypeNames = map[v1.HostPathType]string{
	v1.HostPathDirectory: "a directory",
	v1.HostPathFile:      "a file",
	v1.HostPathSocket:    "a socket file",
	v1.HostPathCharDev:   "a character device",
	v1.HostPathBlockDev:  "a block device",
}

// hostPathFileType is what path is (its target, as the kubelet's
// hostutil.GetFileType stats it), or "" for anything else; exists is
// false when it cannot be stat'ed.
func hostPathFileType(path string) (t v1.HostPathType, exists bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", false
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		return v1.HostPathDirectory, true
	case m.IsRegular():
		return v1.HostPathFile, true
	case m&os.ModeSocket != 0:
		return v1.HostPathSocket, true
	case m&os.ModeCharDevice != 0:
		return v1.HostPathCharDev, true
	case m&os.ModeDevice != 0:
		return v1.HostPathBlockDev, true
	}
	return "", true
}

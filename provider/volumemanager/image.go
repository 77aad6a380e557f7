package volumemanager

import (
	"context"
	"fmt"
	"os"
	"strconv"

	v1 "k8s.io/api/core/v1"
)

// image is the kubelet's image volume plugin (kubernetes.io/image): it sets
// nothing up, as the kubelet's: the image is pulled and mounted when a
// container that mounts it starts (provider/podspec's imagevolume.go), so an
// absent image fails only those containers. Its path is theirs.
type image struct{}

func (image) Name() string                                                       { return "kubernetes.io/image" }
func (image) CanSupport(s *Spec) bool                                            { return s.Claim == nil && s.Volume.Image != nil }
func (image) SetUp(context.Context, *Manager, *v1.Pod, *Spec, ContentFunc) error { return nil }
func (image) Path(*Manager, *v1.Pod, *Spec) (string, bool)                       { return "", true }
func (image) LocalEphemeral(*v1.Volume) bool                                     { return false }
func (image) HasStats() bool                                                     { return false }

// gitRepo is the kubelet's deprecated gitRepo plugin (kubernetes.io/git-repo),
// which hostlet does not set up: known for its name and its data counting
// as the pod's ephemeral storage, as the kubelet counts it.
type gitRepo struct{}

func (gitRepo) Name() string            { return "kubernetes.io/git-repo" }
func (gitRepo) CanSupport(s *Spec) bool { return s.Claim == nil && s.Volume.GitRepo != nil }
func (gitRepo) SetUp(context.Context, *Manager, *v1.Pod, *Spec, ContentFunc) error {
	return errNotSupported
}
func (gitRepo) Path(*Manager, *v1.Pod, *Spec) (string, bool) { return "", false }
func (gitRepo) LocalEphemeral(*v1.Volume) bool               { return true }
func (gitRepo) HasStats() bool                               { return false }

// ImageSubPath is the directory subPath inside the mounted image at root,
// as CRI's ensureImageSubPath: it must exist, stay inside the image and be
// a directory (a single file is not mounted, a KEP-4639 non-goal). The
// image is read-only and cannot change, so the resolved path is given to
// the runtime as is.
func ImageSubPath(root, subPath string) (string, error) {
	dir, err := os.Open(root)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	f, err := lookupBeneath(dir, subPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("only directory subpath is supported, subpath: %q, mountpoint: %q", subPath, root)
	}
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
}

package podspec

import (
	"context"
	"errors"
	"fmt"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"path/filepath"

	"github.com/distribution/reference"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

// Image volumes (KEP-4639): an OCI image's root filesystem mounted
// read-only into containers. As with the kubelet and containerd's CRI, the
// image is pulled as a container's image is (its pull policy, the pod's
// pull secrets, the same events, on the pod) before the container that
// mounts it starts, and a failed pull keeps only the containers that mount
// the volume waiting (ErrImagePull, then ImagePullBackOff). The image's
// layers are mounted through a containerd snapshot view on the pod's
// volume directory when a container first needs them, and bound into the
// container read-only; a subPath must be a directory inside the image.

// imageVolumeErr is the prefix of a failed image volume mount, as CRI's
// (crierrors.ErrImageVolumeMountFailed behind "failed to mount image
// volume"): the kubelet shows it as CreateContainerError.
const imageVolumeErr = "failed to mount image volume: ImageVolumeMountFailed: "

// mountedImageVolumes names the host directory of each image volume the
// container mounts, keyed by volume name.
type mountedImageVolumes map[string]string

// pullImageVolumes ensures the images of the container's image volumes are
// present, in the order the container mounts them, as the kubelet's
// getImageVolumes does for the pod before any of its containers starts.
// A volume the container does not mount is not its concern: an absent
// image there fails no container (the kubelet's "not existing but unused").
func (r *Runtime) pullImageVolumes(ctx context.Context, pod *v1.Pod, c *v1.Container) (map[string]*runtime.Image, error) {
	vols := imageVolumesOf(pod, c)
	if len(vols) == 0 {
		return nil, nil
	}
	out := make(map[string]*runtime.Image, len(vols))
	for _, v := range vols {
		if _, done := out[v.Name]; done {
			continue
		}
		img, err := r.ensurePulled(ctx, pod, "", v.Image.Reference, imageVolumePolicy(v.Image))
		if err != nil {
			if f := (*lifecycle.Failure)(nil); errors.As(err, &f) {
				f.Image = v.Image.Reference
			}
			return nil, err
		}
		out[v.Name] = img
	}
	return out, nil
}

// imageVolumesOf are the image volumes the container mounts, in the order
// of its volumeMounts.
func imageVolumesOf(pod *v1.Pod, c *v1.Container) []*v1.Volume {
	var out []*v1.Volume
	for _, m := range c.VolumeMounts {
		for i := range pod.Spec.Volumes {
			if v := &pod.Spec.Volumes[i]; v.Name == m.Name && v.Image != nil {
				out = append(out, v)
			}
		}
	}
	return out
}

// imageVolumePolicy is the volume's pull policy; the API server defaults
// it as a container's (Always for :latest or no tag, else IfNotPresent),
// and an object that skipped defaulting gets the same.
func imageVolumePolicy(src *v1.ImageVolumeSource) v1.PullPolicy {
	if src.PullPolicy != "" {
		return src.PullPolicy
	}
	// As the API server's SetDefaults_ImageVolumeSource: the "latest"
	// tag, also when none is given, is pulled always.
	named, err := reference.ParseDockerRef(src.Reference)
	if err != nil {
		return v1.PullIfNotPresent
	}
	if t, ok := named.(reference.Tagged); ok && t.Tag() == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// imageVolumeTarget is where the image's layers are mounted for the pod:
// below the volume's directory, one per image digest, so a container
// started after a pull that moved the reference gets the new image while
// the running ones keep theirs, as CRI mounts one per pod and image ID.
func (r *Runtime) imageVolumeTarget(pod *v1.Pod, name, digest string) string {
	return filepath.Join(r.volumeDir(pod, name), digest)
}

// mountImageVolumes mounts the pulled images of the container's image
// volumes (already mounted ones are reused).
// In a pod with a user namespace (idmap) the image's files are the pod's
// root's, as its own image's are.
func (r *Runtime) mountImageVolumes(ctx context.Context, pod *v1.Pod, imgs map[string]*runtime.Image, idmap *runtime.IDMap) (mountedImageVolumes, error) {
	out := make(mountedImageVolumes, len(imgs))
	for name, img := range imgs {
		target := r.imageVolumeTarget(pod, name, img.Digest())
		v := runtime.ImageVolume{Owner: string(pod.UID), Name: name, Image: img, Target: target, IDMap: idmap}
		if err := r.rt.MountImageVolume(ctx, v); err != nil {
			return nil, &lifecycle.Failure{Reason: "CreateContainerError", Message: imageVolumeErr + err.Error()}
		}
		out[name] = target
	}
	return out, nil
}

// imageSubPath is volumemanager.ImageSubPath with the error CRI gives.
func imageSubPath(root, subPath string) (string, error) {
	real, err := volumemanager.ImageSubPath(root, subPath)
	if err != nil {
		return "", &lifecycle.Failure{Reason: "CreateContainerError",
			Message: fmt.Sprintf("%sfailed to ensure image subpath %q in %q: %v", imageVolumeErr, subPath, root, err)}
	}
	return real, nil
}

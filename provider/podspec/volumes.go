package podspec

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hostlet/hostlet/expansion"
	"github.com/hostlet/hostlet/provider/objects"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

func (r *Runtime) volumeDir(pod *v1.Pod, name string) string { return r.volumes.VolumeDir(pod, name) }

// volumeFile is one file of a content volume.
type volumeFile = volumemanager.File

// setupVolumes has the volume manager make every volume of the pod exist
// on the host; content volumes' files come from the pod's objects, read
// once per pass. Calling it again refreshes them.
func (r *Runtime) setupVolumes(ctx context.Context, pod *v1.Pod, podIPs []string) error {
	objs := r.objects(pod.Namespace)
	// Rewritten periodically, also after a failure, so volumes catch up
	// with their objects, as the kubelet's resync does.
	defer r.tokens.scheduleResync(pod, r.nextResync())
	return r.volumes.SetUpPod(ctx, pod, func(ctx context.Context, vol *v1.Volume) (map[string]volumeFile, error) {
		return r.volumeFiles(ctx, pod, vol, podIPs, objs)
	})
}

func mode(def *int32, item *int32) os.FileMode {
	if item != nil {
		return os.FileMode(*item)
	}
	if def != nil {
		return os.FileMode(*def)
	}
	return 0o644
}

// keyed selects the files of a configMap/secret: all keys, or the items. A
// missing item key fails the mount unless the source is optional.
func keyed(data map[string][]byte, items []v1.KeyToPath, defMode *int32, optional *bool, missing string) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = volumeFile{Data: v, Mode: mode(defMode, nil)}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if objects.IsOptional(optional) {
				continue
			}
			return nil, fmt.Errorf("%s: %s", missing, it.Key)
		}
		out[it.Path] = volumeFile{Data: v, Mode: mode(defMode, it.Mode)}
	}
	return out, nil
}

func (r *Runtime) volumeFiles(ctx context.Context, pod *v1.Pod, vol *v1.Volume, podIPs []string, objs *objects.Refs) (map[string]volumeFile, error) {
	src := vol.VolumeSource
	switch {
	case src.ConfigMap != nil:
		return r.configMapFiles(ctx, pod, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, src.ConfigMap.DefaultMode, objs)
	case src.Secret != nil:
		return r.secretFiles(ctx, pod, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, src.Secret.DefaultMode, objs)
	case src.DownwardAPI != nil:
		return r.downwardFiles(pod, src.DownwardAPI.Items, src.DownwardAPI.DefaultMode, podIPs)
	}
	out := map[string]volumeFile{}
	pr := src.Projected
	for i, s := range pr.Sources {
		var files map[string]volumeFile
		var err error
		switch {
		case s.ConfigMap != nil:
			files, err = r.configMapFiles(ctx, pod, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, pr.DefaultMode, objs)
		case s.Secret != nil:
			files, err = r.secretFiles(ctx, pod, s.Secret.Name, s.Secret.Items, s.Secret.Optional, pr.DefaultMode, objs)
		case s.DownwardAPI != nil:
			files, err = r.downwardFiles(pod, s.DownwardAPI.Items, pr.DefaultMode, podIPs)
		case s.ServiceAccountToken != nil:
			files, err = r.tokenFiles(ctx, pod, s.ServiceAccountToken, pr.DefaultMode)
		case s.ClusterTrustBundle != nil:
			files, err = r.trustBundleFiles(pod, s.ClusterTrustBundle, pr.DefaultMode)
		case s.PodCertificate != nil:
			files, err = r.podCertificateFiles(pod, vol.Name, i, s.PodCertificate, pr.DefaultMode)
		default:
			err = fmt.Errorf("projected source not supported by hostlet")
		}
		if err != nil {
			return nil, err
		}
		for k, v := range files {
			out[k] = v
		}
	}
	return out, nil
}

func (r *Runtime) configMapFiles(ctx context.Context, pod *v1.Pod, name string, items []v1.KeyToPath, optional *bool, defMode *int32, objs *objects.Refs) (map[string]volumeFile, error) {
	cm, ok, err := objects.Optional(ctx, objs.ConfigMap, name, optional)
	if err != nil {
		return nil, err
	}
	if !ok {
		return map[string]volumeFile{}, nil
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyed(data, items, defMode, optional, "configmap references non-existent config key")
}

func (r *Runtime) secretFiles(ctx context.Context, pod *v1.Pod, name string, items []v1.KeyToPath, optional *bool, defMode *int32, objs *objects.Refs) (map[string]volumeFile, error) {
	s, ok, err := objects.Optional(ctx, objs.Secret, name, optional)
	if err != nil {
		return nil, err
	}
	if !ok {
		return map[string]volumeFile{}, nil
	}
	return keyed(s.Data, items, defMode, optional, "references non-existent secret key")
}

func (r *Runtime) downwardFiles(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defMode *int32, podIPs []string) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = fieldValue(pod, it.FieldRef.FieldPath, podIPs, r.hostIPs())
		case it.ResourceFieldRef != nil:
			c := findContainer(pod, it.ResourceFieldRef.ContainerName)
			if c == nil {
				return nil, fmt.Errorf("container %s not found", it.ResourceFieldRef.ContainerName)
			}
			v, err = r.resourceValue(pod, c, it.ResourceFieldRef)
		}
		if err != nil {
			return nil, err
		}
		out[it.Path] = volumeFile{Data: []byte(v), Mode: mode(defMode, it.Mode)}
	}
	return out, nil
}

// tokenFiles projects a service-account token bound to the pod.
func (r *Runtime) tokenFiles(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, defMode *int32) (map[string]volumeFile, error) {
	tok, refresh, err := r.tokens.token(ctx, pod, src)
	if err != nil {
		return nil, err
	}
	m := os.FileMode(0o600)
	if defMode != nil {
		m = os.FileMode(*defMode)
	}
	r.tokens.scheduleResync(pod, refresh)
	return map[string]volumeFile{src.Path: {Data: []byte(tok), Mode: m}}, nil
}

// containerMounts maps the container's volumeMounts to host paths. A
// subPath is bound safely (see subpath.go); content volumes are always
// read-only, whatever the mount says, as the kubelet mounts them since 1.10.
// Image volumes are at the directories imageVols names, always read-only.
func (r *Runtime) containerMounts(ctx context.Context, pod *v1.Pod, c *v1.Container, env []string, imageVols mountedImageVolumes) ([]runtime.Mount, error) {
	supportsRRO, checkedRRO := false, false
	vols := map[string]*v1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var out []runtime.Mount
	for i, m := range c.VolumeMounts {
		vol, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", m.Name, c.Name)
		}
		host, ro, err := r.volumes.MountSource(pod, vol)
		if err != nil {
			return nil, err
		}
		ro = ro || m.ReadOnly
		subPath, err := mountSubPath(m, env)
		if err != nil {
			return nil, err
		}
		if vol.Image != nil {
			root, ok := imageVols[m.Name]
			if !ok {
				return nil, fmt.Errorf("image volume %q is not mounted", m.Name)
			}
			host = root
			if subPath != "" {
				if host, err = imageSubPath(root, subPath); err != nil {
					return nil, err
				}
			}
			out = append(out, runtime.Mount{HostPath: host, ContainerPath: m.MountPath, ReadOnly: true, IDMapped: true})
			continue
		}
		if subPath != "" {
			if host, err = r.volumes.PrepareSubPath(pod, c.Name, i, m, host, subPath); err != nil {
				return nil, err
			}
		}
		prop, err := mountPropagation(c, i, m)
		if err != nil {
			return nil, err
		}
		if m.RecursiveReadOnly != nil && !checkedRRO {
			supportsRRO, checkedRRO = r.supportsRecursiveReadOnly(ctx, pod), true
		}
		rro, err := resolveRecursiveReadOnly(m, supportsRRO)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
		}
		out = append(out, runtime.Mount{HostPath: host, ContainerPath: m.MountPath, ReadOnly: ro, Propagation: prop, RecursiveReadOnly: rro})
	}
	return out, nil
}

// mountPropagation is the volumeMount's propagation as the kubelet's
// translateMountPropagation hands it to CRI (none given: private).
// Bidirectional in a container that is not privileged is refused with API
// validation's message: the API server refuses such a pod, and a container
// that could mount onto the host is one that may (and a Bidirectional
// mount's propagation back to the host needs CAP_SYS_ADMIN anyway).
func mountPropagation(c *v1.Container, i int, m v1.VolumeMount) (runtime.Propagation, error) {
	if m.MountPropagation == nil {
		return runtime.PropagationPrivate, nil
	}
	switch *m.MountPropagation {
	case v1.MountPropagationNone:
		return runtime.PropagationPrivate, nil
	case v1.MountPropagationHostToContainer:
		return runtime.PropagationHostToContainer, nil
	case v1.MountPropagationBidirectional:
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			return 0, fmt.Errorf("volumeMounts[%d].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers", i)
		}
		return runtime.PropagationBidirectional, nil
	}
	return 0, fmt.Errorf("invalid MountPropagation mode: %q", *m.MountPropagation)
}

// mountSubPath is a mount's subPath, or its subPathExpr expanded with the
// container's environment, checked as the kubelet checks it.
func mountSubPath(m v1.VolumeMount, env []string) (string, error) {
	sub := m.SubPath
	if m.SubPathExpr != "" {
		lookup := expansion.EnvLookup(env)
		var missing []string
		sub = expansion.Expand(m.SubPathExpr, func(k string) (string, bool) {
			v, ok := lookup(k)
			if !ok || v == "" {
				missing = append(missing, k)
			}
			return v, true
		})
		if len(missing) > 0 {
			sort.Strings(missing)
			return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
		}
	}
	if sub == "" {
		return "", nil
	}
	if filepath.IsAbs(sub) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	}
	for _, part := range strings.Split(filepath.ToSlash(sub), "/") {
		if part == ".." {
			return "", fmt.Errorf("must not contain '..'")
		}
	}
	return sub, nil
}

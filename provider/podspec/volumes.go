package podspec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hostlet/hostlet/expansion"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func (r *Runtime) volumeDir(pod *v1.Pod, name string) string { return r.layout().VolumeDir(pod, name) }

// setupVolumes makes every volume of the pod exist on the host. Content
// volumes are (re)written atomically, so calling it again refreshes them.
func (r *Runtime) setupVolumes(ctx context.Context, pod *v1.Pod, podIPs []string) error {
	objs := r.objects(pod.Namespace)
	// Rewritten periodically, also after a failure, so volumes catch up
	// with their objects, as the kubelet's resync does.
	defer r.tokens.scheduleResync(pod, r.nextResync())
	// Claims first, as the kubelet's populator resolves them before any
	// volume is mounted.
	if err := r.resolveClaims(ctx, pod); err != nil {
		return err
	}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if err := r.setupVolume(ctx, pod, vol, podIPs, objs); err != nil {
			if f := (*lifecycle.Failure)(nil); errors.As(err, &f) {
				return f
			}
			return &lifecycle.Failure{Reason: "FailedMount",
				Message: fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", vol.Name, err)}
		}
	}
	return nil
}

func (r *Runtime) setupVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume, podIPs []string, objs *objects) error {
	dir := r.volumeDir(pod, vol.Name)
	src := vol.VolumeSource
	switch {
	case src.EmptyDir != nil:
		if _, err := os.Stat(dir); err == nil {
			// Set up already: its contents are the pod's own.
			return nil
		}
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		// emptyDir is world-writable, as the kubelet makes it (setupDir),
		// before a tmpfs goes on it: the tmpfs root is 1777, sticky as the
		// kubelet's (a subPath made in it, which copies the root's mode,
		// is too).
		if err := os.Chmod(dir, 0o777); err != nil {
			return err
		}
		if src.EmptyDir.Medium == v1.StorageMediumMemory {
			opts := "mode=1777"
			if size := r.memoryVolumeSize(pod, src.EmptyDir.SizeLimit); size > 0 {
				opts += fmt.Sprintf(",size=%d", size)
			}
			if err := ensureTmpfs(dir, opts); err != nil {
				return err
			}
		}
		return applyFSGroup(dir, podFSGroup(pod), false)
	case src.HostPath != nil:
		return r.setupHostPath(src.HostPath)
	case isContentVolume(vol):
		files, err := r.volumeFiles(ctx, pod, vol, podIPs, objs)
		if err != nil {
			return err
		}
		if src.Secret != nil || src.Projected != nil {
			// Secrets and tokens never touch the disk.
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := ensureTmpfs(dir, "mode=0755"); err != nil {
				return err
			}
		}
		fsGroup := podFSGroup(pod)
		changed, err := writeAtomic(dir, files, func(ts string) error { return applyFSGroup(ts, fsGroup, true) })
		if err != nil || !changed {
			return err
		}
		// The top directory and its new links too.
		return applyFSGroup(dir, fsGroup, true)
	case src.PersistentVolumeClaim != nil || src.Ephemeral != nil:
		return r.setupClaim(ctx, pod, vol)
	case src.CSI != nil:
		return r.setUpCSI(ctx, pod, vol, "", nil, false)
	case src.Image != nil:
		// Pulled and mounted when a container that mounts it starts (as
		// the kubelet's image plugin sets nothing up): an absent image
		// fails only those containers (imagevolume.go).
		return nil
	}
	return fmt.Errorf("volume type not supported by hostlet")
}

// memoryVolumeSize is the size of a memory-backed emptyDir as the kubelet
// computes it: the smallest of node allocatable memory, the pod's memory
// limit (when every container has one) and the volume's sizeLimit.
func (r *Runtime) memoryVolumeSize(pod *v1.Pod, sizeLimit *resource.Quantity) int64 {
	size := int64(0)
	if q, ok := r.allocatable()[v1.ResourceMemory]; ok {
		size = q.Value()
	}
	smaller := func(v int64) {
		if v > 0 && (size == 0 || v <= size) {
			size = v
		}
	}
	if l, ok := podMemoryLimit(pod); ok {
		smaller(l)
	}
	if sizeLimit != nil {
		smaller(sizeLimit.Value())
	}
	return size
}

// podMemoryLimit is the pod's memory limit: the sum over its containers, at
// least the largest init container's, and none if any container lacks one.
func podMemoryLimit(pod *v1.Pod) (int64, bool) {
	var sum int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return 0, false
		}
		sum += q.Value()
	}
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return 0, false
		}
		sum = max(sum, q.Value())
	}
	return sum, true
}

// setupHostPath checks a hostPath volume's type as the kubelet's hostPath
// plugin does (checkTypeInternal): the *OrCreate types make a missing path
// and otherwise check what exists like their plain types; every other type
// names what the path (symlinks followed) must be. A failure keeps the pod
// Pending with a FailedMount event.
func (r *Runtime) setupHostPath(hp *v1.HostPathVolumeSource) error {
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

func ensureTmpfs(dir, opts string) error {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return err
	}
	if st.Dev != parent.Dev {
		return nil // already a mount point
	}
	return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
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
			if isOptional(optional) {
				continue
			}
			return nil, fmt.Errorf("%s: %s", missing, it.Key)
		}
		out[it.Path] = volumeFile{Data: v, Mode: mode(defMode, it.Mode)}
	}
	return out, nil
}

func (r *Runtime) volumeFiles(ctx context.Context, pod *v1.Pod, vol *v1.Volume, podIPs []string, objs *objects) (map[string]volumeFile, error) {
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

func (r *Runtime) configMapFiles(ctx context.Context, pod *v1.Pod, name string, items []v1.KeyToPath, optional *bool, defMode *int32, objs *objects) (map[string]volumeFile, error) {
	cm, ok, err := optionalRef(ctx, objs.configMap, name, optional)
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

func (r *Runtime) secretFiles(ctx context.Context, pod *v1.Pod, name string, items []v1.KeyToPath, optional *bool, defMode *int32, objs *objects) (map[string]volumeFile, error) {
	s, ok, err := optionalRef(ctx, objs.secret, name, optional)
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
		host := r.volumeDir(pod, m.Name)
		ro := m.ReadOnly || isContentVolume(vol)
		if vol.HostPath != nil {
			host = vol.HostPath.Path
		}
		if vol.CSI != nil {
			// Where the driver published it, read-only if the source says so.
			host = csi.TargetPath(r.layout(), pod.UID, vol.Name)
			ro = ro || (vol.CSI.ReadOnly != nil && *vol.CSI.ReadOnly)
		}
		if _, _, ok := volumes.ClaimName(pod, vol); ok {
			var claimRO bool
			var err error
			if host, claimRO, err = r.claimMount(pod, vol); err != nil {
				return nil, err
			}
			ro = ro || claimRO
		}
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
			if host, err = r.prepareSubPath(pod, c, i, m, host, subPath); err != nil {
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

// isContentVolume: the volume's files are written by hostlet from API
// objects, never by the pod.
func isContentVolume(v *v1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

// teardownVolumes unmounts the pod's subPath binds and tmpfs volumes, and
// removes its files.
func (r *Runtime) teardownVolumes(uid string) error {
	_, err := removeUnmounted(r.layout().PodDir(types.UID(uid)))
	return err
}

// teardownPodVolumes unmounts and removes the volumes of a pod that ended
// and their subPath binds, as the kubelet's volume manager tears down a
// terminated pod's volumes; the rest of its directory (its containers'
// termination messages) stays until the pod is deleted. It reports whether
// there was anything to remove.
func (r *Runtime) teardownPodVolumes(uid string) (bool, error) {
	subpaths, err := removeUnmounted(r.layout().PodSubPathsDir(types.UID(uid)))
	if err != nil {
		return subpaths, err
	}
	vols, err := removeUnmounted(r.layout().PodVolumesDir(types.UID(uid)))
	return subpaths || vols, err
}

// removeUnmounted unmounts everything at or below dir and removes it,
// reporting whether it existed. Nothing is removed while anything below dir
// is still mounted: a removal would reach through the mount (a subPath of a
// hostPath volume is the host's own data).
func removeUnmounted(dir string) (bool, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err := unmountUnder(dir); err != nil {
		return true, fmt.Errorf("not removing %s: %w", dir, err)
	}
	return true, os.RemoveAll(dir)
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

func podFSGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

package cri

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/containerd/errdefs"
	"github.com/hostlet/hostlet/runtime"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/dump"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"hash/fnv"
)

// The kubelet's annotations on a CRI container (labels.go).
const (
	annotationHash                     = "io.kubernetes.container.hash"
	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	annotationPreStopHandler           = "io.kubernetes.container.preStopHandler"
	annotationPorts                    = "io.kubernetes.container.ports"
	annotationTerminationGracePeriod   = "io.kubernetes.pod.terminationGracePeriod"
)

// CRI's reasons for an exited container without one of its own
// (containerd's completeExitReason, errorExitReason).
const (
	reasonCompleted = "Completed"
	reasonError     = "Error"
)

func (s *server) ListContainers(ctx context.Context, r *criapi.ListContainersRequest) (*criapi.ListContainersResponse, error) {
	pods, containers, err := s.snapshotWithContainers(ctx)
	if err != nil {
		return nil, err
	}
	imgs, err := s.cfg.Images.CRIImages(ctx)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	ids := imageIDs(imgs)
	out := make([]*criapi.Container, 0, len(containers))
	for _, c := range containers {
		out = append(out, criContainer(pods[c.PodUID], c, ids))
	}
	slices.SortStableFunc(out, func(a, b *criapi.Container) int { return cmp.Compare(b.CreatedAt, a.CreatedAt) })
	return &criapi.ListContainersResponse{Containers: filterContainers(out, r.GetFilter())}, nil
}

func (s *server) ContainerStatus(ctx context.Context, r *criapi.ContainerStatusRequest) (*criapi.ContainerStatusResponse, error) {
	id := r.GetContainerId()
	if !isFullID(id) {
		// A prefix: resolved against the node's containers. crictl resolves
		// prefixes itself (ListContainers with the id filter) and passes full
		// ids, so this is the rare path; a full id asks one container only.
		_, containers, err := s.snapshotWithContainers(ctx)
		if err != nil {
			return nil, err
		}
		ids := make([]string, 0, len(containers))
		for _, c := range containers {
			ids = append(ids, c.ID)
		}
		if id, err = resolveID(ids, id); err != nil {
			return nil, fmt.Errorf("an error occurred when try to find container %q: %w", r.GetContainerId(), err)
		}
	}
	c, err := s.cfg.Runtime.ContainerStatus(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", id)
		}
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	if c.PodUID == "" {
		// Not one of a pod's containers: not in the view, as ListContainers.
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", id)
	}
	// The pods are read from records and the container list, no task asked.
	pods, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	mounts, err := s.cfg.Runtime.ContainerMounts(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("mounts of container %q: %w", id, err)
	}
	st := containerStatus(pods[c.PodUID], c, mounts)
	imgs, err := s.cfg.Images.CRIImages(ctx)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	img, found := resolveImage(imgs, c.ImageName)
	if found {
		statusImage(st, img)
	}
	info, err := s.cfg.Runtime.ContainerInfo(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	st.Resources = specResources(info.Spec)
	resp := &criapi.ContainerStatusResponse{Status: st}
	if r.GetVerbose() {
		image := c.ImageID
		if found {
			image = img.ConfigDigest
		}
		b, err := json.Marshal(verboseContainerInfo(pods[c.PodUID], c, mounts, image, info))
		if err != nil {
			return nil, fmt.Errorf("failed to marshal info of container %q: %w", id, err)
		}
		resp.Info = map[string]string{"info": string(b)}
	}
	return resp, nil
}

// specResources are the container's resources as containerd's
// ContainerStatus has them (copyResourcesToStatus): read from its OCI
// spec, what is not set there 0.
func specResources(spec *specs.Spec) *criapi.ContainerResources {
	out := &criapi.ContainerResources{}
	if spec == nil || spec.Linux == nil {
		return out
	}
	l := &criapi.LinuxContainerResources{}
	out.Linux = l
	if spec.Process != nil && spec.Process.OOMScoreAdj != nil {
		l.OomScoreAdj = int64(*spec.Process.OOMScoreAdj)
	}
	r := spec.Linux.Resources
	if r == nil {
		return out
	}
	if c := r.CPU; c != nil {
		if c.Period != nil {
			l.CpuPeriod = int64(*c.Period)
		}
		if c.Quota != nil {
			l.CpuQuota = *c.Quota
		}
		if c.Shares != nil {
			l.CpuShares = int64(*c.Shares)
		}
		l.CpusetCpus, l.CpusetMems = c.Cpus, c.Mems
	}
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			l.MemoryLimitInBytes = *m.Limit
		}
		if m.Swap != nil {
			l.MemorySwapLimitInBytes = *m.Swap
		}
	}
	if r.HugepageLimits != nil {
		l.HugepageLimits = make([]*criapi.HugepageLimit, 0, len(r.HugepageLimits))
		for _, h := range r.HugepageLimits {
			l.HugepageLimits = append(l.HugepageLimits, &criapi.HugepageLimit{PageSize: h.Pagesize, Limit: h.Limit})
		}
	}
	l.Unified = r.Unified
	return out
}

// containerInfo is containerd's verbose container status (its
// ContainerInfo, under the "info" key, as crictl inspect shows it).
type containerInfo struct {
	SandboxID      string                  `json:"sandboxID"`
	Pid            uint32                  `json:"pid"`
	Removing       bool                    `json:"removing"`
	SnapshotKey    string                  `json:"snapshotKey"`
	Snapshotter    string                  `json:"snapshotter"`
	RuntimeType    string                  `json:"runtimeType"`
	RuntimeOptions any                     `json:"runtimeOptions"`
	Config         *criapi.ContainerConfig `json:"config"`
	RuntimeSpec    *specs.Spec             `json:"runtimeSpec"`
}

// verboseContainerInfo is the container's containerInfo. Its config is
// the part of the kubelet's CreateContainer request hostlet has (no such
// request was made): metadata, image (its ID and the pod spec's name),
// labels, annotations, log path (relative to the pod's log directory),
// mounts. The pid is the live task's (containerd keeps an exited one's).
func verboseContainerInfo(p *podSandbox, c runtime.ContainerStatus, mounts []runtime.Mount, imageID string, info runtime.CRIContainerInfo) containerInfo {
	cfg := &criapi.ContainerConfig{
		Metadata:    &criapi.ContainerMetadata{Name: c.Name, Attempt: uint32(c.Attempt)},
		Image:       &criapi.ImageSpec{Image: imageID, UserSpecifiedImage: c.ImageName},
		Labels:      containerLabels(p, c),
		Annotations: containerAnnotations(p, c),
		Mounts:      criMounts(mounts),
	}
	if c.LogPath != "" {
		cfg.LogPath = filepath.Join(filepath.Base(filepath.Dir(c.LogPath)), filepath.Base(c.LogPath))
	}
	return containerInfo{
		SandboxID: sandboxID(c.PodUID), Pid: info.Pid, SnapshotKey: info.SnapshotKey, Snapshotter: info.Snapshotter,
		RuntimeType: info.RuntimeType, RuntimeOptions: info.RuntimeOptions, Config: cfg, RuntimeSpec: info.Spec,
	}
}

// statusImage names the container's image as containerd's ContainerStatus
// does when the node has the image: by its first tag alone (no user
// specified image), image_ref its first repo digest.
func statusImage(st *criapi.ContainerStatus, img runtime.CRIImage) {
	digests, tags := img.RepoDigestsAndTags()
	if len(tags) > 0 {
		st.Image = &criapi.ImageSpec{Image: tags[0]}
	}
	if len(digests) > 0 {
		st.ImageRef = digests[0]
	}
}

// isFullID is whether id is a whole containerd id as hostlet makes them (64
// hex digits, as CRI's), not a prefix of one.
func isFullID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// imageIDs maps every name of an image to its CRI id (its config digest).
func imageIDs(imgs []runtime.CRIImage) map[string]string {
	out := map[string]string{}
	for _, img := range imgs {
		for _, n := range img.Names {
			out[n] = img.ConfigDigest
		}
	}
	return out
}

// criContainer is a container as ListContainers has it. Its image is the
// image's ID, as the kubelet gives CreateContainer (and crictl ps
// truncates), with the name the pod spec wrote; its image_ref the ID too,
// as containerd's CRI lists it.
func criContainer(p *podSandbox, c runtime.ContainerStatus, imageIDs map[string]string) *criapi.Container {
	image := imageIDs[normalized(c.ImageName)]
	if image == "" {
		image = c.ImageID // the image is gone: its repo digest still names it
	}
	return &criapi.Container{
		Id:           c.ID,
		PodSandboxId: sandboxID(c.PodUID),
		Metadata:     &criapi.ContainerMetadata{Name: c.Name, Attempt: uint32(c.Attempt)},
		Image:        &criapi.ImageSpec{Image: image, UserSpecifiedImage: c.ImageName},
		ImageRef:     image,
		State:        containerState(c.State),
		CreatedAt:    c.CreatedAt.UnixNano(),
		Labels:       containerLabels(p, c),
		Annotations:  containerAnnotations(p, c),
	}
}

// containerStatus is ContainerStatus as containerd's CRI answers it: the
// image by its tag and image_ref its repo digest (what the pod status's
// image and imageID show; statusImage names them as the node's image has
// them), started and finished times only once they are.
func containerStatus(p *podSandbox, c runtime.ContainerStatus, mounts []runtime.Mount) *criapi.ContainerStatus {
	st := &criapi.ContainerStatus{
		Id:          c.ID,
		Metadata:    &criapi.ContainerMetadata{Name: c.Name, Attempt: uint32(c.Attempt)},
		State:       containerState(c.State),
		CreatedAt:   c.CreatedAt.UnixNano(),
		Image:       &criapi.ImageSpec{Image: normalized(c.ImageName), UserSpecifiedImage: c.ImageName},
		ImageRef:    c.ImageID,
		Labels:      containerLabels(p, c),
		Annotations: containerAnnotations(p, c),
		Mounts:      criMounts(mounts),
		LogPath:     c.LogPath,
		User:        &criapi.ContainerUser{},
	}
	switch c.State {
	case runtime.StateRunning:
		st.StartedAt = c.StartedAt.UnixNano()
	case runtime.StateExited:
		if !c.StartedAt.IsZero() {
			st.StartedAt = c.StartedAt.UnixNano()
		}
		st.FinishedAt = c.FinishedAt.UnixNano()
		st.ExitCode = c.ExitCode
		st.Reason = c.Reason
		if st.Reason == "" {
			st.Reason = reasonCompleted
			if c.ExitCode != 0 {
				st.Reason = reasonError
			}
		}
		// No message: containerd's CRI has one only for a container that
		// failed to start; the kubelet reads the termination message
		// itself, from the file or the log.
	}
	if u := c.User; u != nil {
		st.User.Linux = &criapi.LinuxContainerUser{Uid: int64(u.UID), Gid: int64(u.GID)}
		for _, g := range u.SupplementalGroups {
			st.User.Linux.SupplementalGroups = append(st.User.Linux.SupplementalGroups, int64(g))
		}
	}
	return st
}

func normalized(image string) string {
	if n, err := runtime.NormalizeImage(image); err == nil {
		return n
	}
	return image
}

func containerState(s runtime.State) criapi.ContainerState {
	switch s {
	case runtime.StateCreated:
		return criapi.ContainerState_CONTAINER_CREATED
	case runtime.StateRunning:
		return criapi.ContainerState_CONTAINER_RUNNING
	case runtime.StateExited:
		return criapi.ContainerState_CONTAINER_EXITED
	}
	return criapi.ContainerState_CONTAINER_UNKNOWN
}

// containerLabels are the kubelet's newContainerLabels.
func containerLabels(p *podSandbox, c runtime.ContainerStatus) map[string]string {
	out := map[string]string{labelPodUID: c.PodUID, labelContainerName: c.Name}
	if p != nil {
		out[labelPodName], out[labelPodNamespace] = p.ref.Name, p.ref.Namespace
	}
	return out
}

// containerAnnotations are the kubelet's newContainerAnnotations, from the
// container's spec in the pod (none once the node no longer runs the
// pod): restartCount is the attempt it was created as.
func containerAnnotations(p *podSandbox, c runtime.ContainerStatus) map[string]string {
	out := map[string]string{annotationRestartCount: strconv.Itoa(c.Attempt)}
	if p == nil || p.pod == nil {
		return out
	}
	spec := containerSpec(p.pod, c.Name)
	if spec == nil {
		return out
	}
	out[annotationHash] = strconv.FormatUint(hashContainer(spec), 16)
	out[annotationTerminationMessagePath] = spec.TerminationMessagePath
	out[annotationTerminationMessagePolicy] = string(spec.TerminationMessagePolicy)
	if g := p.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		out[annotationTerminationGracePeriod] = strconv.FormatInt(*g, 10)
	}
	if spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil {
		if b, err := json.Marshal(spec.Lifecycle.PreStop); err == nil {
			out[annotationPreStopHandler] = string(b)
		}
	}
	if len(spec.Ports) > 0 {
		if b, err := json.Marshal(spec.Ports); err == nil {
			out[annotationPorts] = string(b)
		}
	}
	return out
}

// containerSpec is the pod's container of that name, of any kind.
func containerSpec(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if e := &pod.Spec.EphemeralContainers[i]; e.Name == name {
			c := v1.Container(e.EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}

// hashContainer is the kubelet's HashContainer (pkg/kubelet/container):
// FNV-32a of the dump of the JSON of the container's name and image, the
// fields whose change makes the kubelet restart it.
func hashContainer(c *v1.Container) uint64 {
	b, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(b))
	return uint64(h.Sum32())
}

// criMounts are runtime mounts as CRI's.
func criMounts(ms []runtime.Mount) []*criapi.Mount {
	out := make([]*criapi.Mount, 0, len(ms))
	for _, m := range ms {
		cm := &criapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.ReadOnly,
			RecursiveReadOnly: m.RecursiveReadOnly}
		switch m.Propagation {
		case runtime.PropagationHostToContainer:
			cm.Propagation = criapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		case runtime.PropagationBidirectional:
			cm.Propagation = criapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
		}
		out = append(out, cm)
	}
	return out
}

// filterContainers applies ListContainers' filter as containerd's CRI
// does: id and sandbox id (or prefixes of them), state, labels.
func filterContainers(items []*criapi.Container, f *criapi.ContainerFilter) []*criapi.Container {
	if f == nil {
		return items
	}
	id, sandbox := f.GetId(), f.GetPodSandboxId()
	var ids, sandboxes []string
	for _, c := range items {
		ids = append(ids, c.Id)
		sandboxes = append(sandboxes, c.PodSandboxId)
	}
	if full, err := resolveID(ids, id); err == nil {
		id = full
	}
	if full, err := resolveID(slices.Compact(slices.Sorted(slices.Values(sandboxes))), sandbox); err == nil {
		sandbox = full
	}
	out := []*criapi.Container{}
	for _, c := range items {
		if id != "" && c.Id != id {
			continue
		}
		if sandbox != "" && c.PodSandboxId != sandbox {
			continue
		}
		if f.GetState() != nil && f.GetState().GetState() != c.State {
			continue
		}
		if !matchLabels(c.Labels, f.GetLabelSelector()) {
			continue
		}
		out = append(out, c)
	}
	return out
}

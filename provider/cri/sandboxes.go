package cri

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's labels and annotations on CRI objects
// (pkg/kubelet/kuberuntime/labels.go, k8s.io/kubelet/pkg/types).
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationConfigSeen   = "kubernetes.io/config.seen"
	annotationConfigSource = "kubernetes.io/config.source"
)

// podSandbox is one pod's sandbox as the view has it: whatever of the pod
// is known (its object while the node runs it, its record while the
// sandbox exists, its name from its containers' labels).
type podSandbox struct {
	uid string
	ref runtime.PodRef
	// pod is the pod with its latest status; nil once the node no longer
	// runs it (a pod that ended before hostlet restarted).
	pod  *v1.Pod
	seen time.Time
	// rec is the sandbox's record; nil once it was released (the pod
	// ended) or never whole enough to be written.
	rec *runtime.SandboxRecord
	// firstContainer is when the pod's first container still there was
	// created: a creation time when there is no record.
	firstContainer time.Time
}

// sandboxID is the CRI id of a pod's sandbox: hostlet has one sandbox per
// pod, made again under the same UID when it is lost, and no id of its
// own for it. Derived from the UID, it is stable across restarts of
// hostlet and as long as containerd's (64 hex digits).
func sandboxID(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:])
}

// snapshot gathers the node's sandboxes: every pod with a sandbox record
// or containers, as a kubelet node lists a sandbox until the pod is
// removed. Read from records and containerd's container list only, no
// task asked: agents poll ListPodSandbox.
func (s *server) snapshot(ctx context.Context) (map[string]*podSandbox, error) {
	recs, err := s.cfg.Runtime.SandboxRecords()
	if err != nil {
		return nil, fmt.Errorf("sandbox records: %w", err)
	}
	refs, err := s.cfg.Runtime.ContainerPods(ctx)
	if err != nil {
		return nil, fmt.Errorf("containers' pods: %w", err)
	}
	pods := map[string]*podSandbox{}
	get := func(uid string) *podSandbox {
		p := pods[uid]
		if p == nil {
			p = &podSandbox{uid: uid, ref: runtime.PodRef{UID: uid}}
			if pod, err := s.cfg.Pods.GetPodByUID(ctx, types.UID(uid)); err == nil && pod != nil {
				p.pod = pod
				p.seen, _ = s.cfg.Pods.SeenAt(types.UID(uid))
			}
			pods[uid] = p
		}
		return p
	}
	for i := range recs {
		p := get(recs[i].UID)
		p.rec = &recs[i]
		p.ref.Namespace, p.ref.Name = recs[i].Namespace, recs[i].Name
	}
	for uid, ref := range refs {
		p := get(uid)
		if p.ref.Name == "" {
			p.ref.Namespace, p.ref.Name = ref.Namespace, ref.Name
		}
		p.firstContainer = ref.FirstCreated
	}
	return pods, nil
}

// snapshotWithContainers is snapshot and all the node's containers' states.
func (s *server) snapshotWithContainers(ctx context.Context) (map[string]*podSandbox, []runtime.ContainerStatus, error) {
	pods, err := s.snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	containers, err := s.cfg.Runtime.ListContainers(ctx, "")
	if err != nil {
		return nil, nil, fmt.Errorf("containers: %w", err)
	}
	return pods, containers, nil
}

func (s *server) ListPodSandbox(ctx context.Context, r *criapi.ListPodSandboxRequest) (*criapi.ListPodSandboxResponse, error) {
	pods, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return &criapi.ListPodSandboxResponse{Items: filterSandboxes(sortedSandboxes(pods), r.GetFilter())}, nil
}

func (s *server) PodSandboxStatus(ctx context.Context, r *criapi.PodSandboxStatusRequest) (*criapi.PodSandboxStatusResponse, error) {
	p, err := s.sandbox(ctx, r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp := &criapi.PodSandboxStatusResponse{Status: sandboxStatus(p)}
	if r.GetVerbose() {
		if resp.Info, err = s.sandboxVerboseInfo(ctx, p); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// sandbox is the node's sandbox id names (findSandbox), now.
func (s *server) sandbox(ctx context.Context, id string) (*podSandbox, error) {
	pods, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return findSandbox(pods, id)
}

// sortedSandboxes lists the sandboxes, newest first as crictl shows them.
func sortedSandboxes(pods map[string]*podSandbox) []*criapi.PodSandbox {
	out := make([]*criapi.PodSandbox, 0, len(pods))
	for _, uid := range slices.Sorted(maps.Keys(pods)) {
		out = append(out, criSandbox(pods[uid]))
	}
	slices.SortStableFunc(out, func(a, b *criapi.PodSandbox) int { return cmp.Compare(b.CreatedAt, a.CreatedAt) })
	return out
}

// findSandbox is the sandbox of that id, or of the one id it is a prefix
// of (crictl passes the truncated ids it prints, as containerd's CRI
// takes them).
func findSandbox(pods map[string]*podSandbox, id string) (*podSandbox, error) {
	ids := make(map[string]*podSandbox, len(pods))
	for uid, p := range pods {
		ids[sandboxID(uid)] = p
	}
	full, err := resolveID(slices.Collect(maps.Keys(ids)), id)
	if err != nil {
		return nil, fmt.Errorf("an error occurred when try to find sandbox %q: %w", id, err)
	}
	return ids[full], nil
}

// resolveID is the id of ids that is id or the only one id prefixes.
func resolveID(ids []string, id string) (string, error) {
	if id == "" {
		return "", status.Error(codes.InvalidArgument, "no id given")
	}
	var found string
	for _, full := range ids {
		if full == id {
			return full, nil
		}
		if len(id) < len(full) && full[:len(id)] == id {
			if found != "" {
				return "", status.Errorf(codes.InvalidArgument, "id %q is ambiguous", id)
			}
			found = full
		}
	}
	if found == "" {
		return "", status.Errorf(codes.NotFound, "%q not found", id)
	}
	return found, nil
}

func (p *podSandbox) state() criapi.PodSandboxState {
	if p.rec != nil && p.rec.Ready {
		return criapi.PodSandboxState_SANDBOX_READY
	}
	return criapi.PodSandboxState_SANDBOX_NOTREADY
}

// createdAt is when the sandbox was made; a released one (no record
// left) has the pod's start, or else its first container's creation: CRI
// allows no zero time.
func (p *podSandbox) createdAt() int64 {
	if p.rec != nil && !p.rec.CreatedAt.IsZero() {
		return p.rec.CreatedAt.UnixNano()
	}
	if p.pod != nil && p.pod.Status.StartTime != nil {
		return p.pod.Status.StartTime.UnixNano()
	}
	first := p.firstContainer
	if first.IsZero() {
		first = time.Now()
	}
	return first.UnixNano()
}

// metadata is the sandbox's as the kubelet gives RunPodSandbox. The
// attempt stays 0: a sandbox hostlet makes again (lost, not ready) keeps
// its pod's UID and is not counted.
func (p *podSandbox) metadata() *criapi.PodSandboxMetadata {
	return &criapi.PodSandboxMetadata{Name: p.ref.Name, Namespace: p.ref.Namespace, Uid: p.uid}
}

// labels are the kubelet's newPodLabels: the pod's labels and its name,
// namespace and UID.
func (p *podSandbox) labels() map[string]string {
	out := map[string]string{}
	if p.pod != nil {
		maps.Copy(out, p.pod.Labels)
	}
	out[labelPodName] = p.ref.Name
	out[labelPodNamespace] = p.ref.Namespace
	out[labelPodUID] = p.uid
	return out
}

// annotations are the pod's, as the kubelet's pod config has them: it
// stamps every pod with where it came from and when it first saw it
// (static pods have both from their source already).
func (p *podSandbox) annotations() map[string]string {
	out := map[string]string{}
	if p.pod == nil {
		return out
	}
	maps.Copy(out, p.pod.Annotations)
	if _, ok := out[annotationConfigSource]; !ok {
		out[annotationConfigSource] = "api"
	}
	if _, ok := out[annotationConfigSeen]; !ok && !p.seen.IsZero() {
		out[annotationConfigSeen] = p.seen.Format(time.RFC3339Nano)
	}
	return out
}

func (p *podSandbox) handler() string {
	if p.rec != nil {
		return p.rec.Handler
	}
	return ""
}

func criSandbox(p *podSandbox) *criapi.PodSandbox {
	return &criapi.PodSandbox{
		Id:             sandboxID(p.uid),
		Metadata:       p.metadata(),
		State:          p.state(),
		CreatedAt:      p.createdAt(),
		Labels:         p.labels(),
		Annotations:    p.annotations(),
		RuntimeHandler: p.handler(),
	}
}

// sandboxStatus is PodSandboxStatus as containerd's CRI answers it: no IP
// for a pod on the host's network or a sandbox whose network is gone.
func sandboxStatus(p *podSandbox) *criapi.PodSandboxStatus {
	st := &criapi.PodSandboxStatus{
		Id:             sandboxID(p.uid),
		Metadata:       p.metadata(),
		State:          p.state(),
		CreatedAt:      p.createdAt(),
		Network:        &criapi.PodSandboxNetworkStatus{},
		Linux:          &criapi.LinuxPodSandboxStatus{Namespaces: &criapi.Namespace{Options: p.namespaceOptions()}},
		Labels:         p.labels(),
		Annotations:    p.annotations(),
		RuntimeHandler: p.handler(),
	}
	if rec := p.rec; rec != nil && rec.Ready && !rec.HostNetwork && len(rec.IPs) > 0 {
		st.Network.Ip = rec.IPs[0]
		for _, ip := range rec.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &criapi.PodIP{Ip: ip})
		}
	}
	return st
}

// namespaceOptions are the kubelet's namespacesForPod: from the pod's spec
// while it is known, else from the sandbox's record.
func (p *podSandbox) namespaceOptions() *criapi.NamespaceOption {
	var hostNet, hostIPC, hostPID, share bool
	switch {
	case p.pod != nil:
		spec := &p.pod.Spec
		hostNet, hostIPC, hostPID = spec.HostNetwork, spec.HostIPC, spec.HostPID
		share = spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace
	case p.rec != nil:
		hostNet, hostIPC, hostPID, share = p.rec.HostNetwork, p.rec.HostIPC, p.rec.HostPID, p.rec.PausePID != 0
	}
	mode := func(host bool) criapi.NamespaceMode {
		if host {
			return criapi.NamespaceMode_NODE
		}
		return criapi.NamespaceMode_POD
	}
	o := &criapi.NamespaceOption{Network: mode(hostNet), Ipc: mode(hostIPC), Pid: criapi.NamespaceMode_CONTAINER}
	switch {
	case hostPID:
		o.Pid = criapi.NamespaceMode_NODE
	case share:
		o.Pid = criapi.NamespaceMode_POD
	}
	o.UsernsOptions = &criapi.UserNamespace{Mode: criapi.NamespaceMode_NODE}
	if p.rec != nil && p.rec.IDMap != nil {
		m := []*criapi.IDMapping{{HostId: p.rec.IDMap.HostID, ContainerId: 0, Length: p.rec.IDMap.Size}}
		o.UsernsOptions = &criapi.UserNamespace{Mode: criapi.NamespaceMode_POD, Uids: m, Gids: m}
	} else if p.pod != nil && p.pod.Spec.HostUsers != nil && !*p.pod.Spec.HostUsers {
		o.UsernsOptions = &criapi.UserNamespace{Mode: criapi.NamespaceMode_POD}
	}
	return o
}

// filterSandboxes applies ListPodSandbox's filter as containerd's CRI
// does: id (or a prefix of one), state, labels all matching.
func filterSandboxes(items []*criapi.PodSandbox, f *criapi.PodSandboxFilter) []*criapi.PodSandbox {
	if f == nil {
		return items
	}
	id := f.GetId()
	if id != "" {
		ids := make([]string, 0, len(items))
		for _, s := range items {
			ids = append(ids, s.Id)
		}
		if full, err := resolveID(ids, id); err == nil {
			id = full
		}
	}
	out := []*criapi.PodSandbox{}
	for _, s := range items {
		if id != "" && s.Id != id {
			continue
		}
		if f.GetState() != nil && f.GetState().GetState() != s.State {
			continue
		}
		if !matchLabels(s.Labels, f.GetLabelSelector()) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// matchLabels: every selector label is there with its value.
func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

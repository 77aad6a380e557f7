package cri

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/runtime"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/ptr"
)

type fakePods map[types.UID]*v1.Pod

var seen = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

func (f fakePods) GetPodByUID(_ context.Context, uid types.UID) (*v1.Pod, error) {
	if p, ok := f[uid]; ok {
		return p, nil
	}
	return nil, errors.New("not found")
}

func (f fakePods) SeenAt(uid types.UID) (time.Time, bool) {
	_, ok := f[uid]
	return seen, ok
}

func (f fakePods) ContainerExited(runtime.ContainerStatus) {}

// exitsPods records the exits handed to the pods' workers.
type exitsPods struct {
	fakePods
	exits *[]string
}

func (p exitsPods) ContainerExited(st runtime.ContainerStatus) {
	*p.exits = append(*p.exits, fmt.Sprintf("%s %s", st.ID, st.State))
}

type fakeRuntime struct {
	recs       []runtime.SandboxRecord
	refs       map[string]runtime.PodRef
	containers []runtime.ContainerStatus
	mounts     map[string][]runtime.Mount
	imgs       []runtime.CRIImage
	// lists counts ListContainers calls: each asks every task.
	lists   int
	metrics map[string]runtime.ContainerStats
	layers  map[string]runtime.DiskUsage
	// deprecations are containerd's deprecation warnings.
	deprecations map[string]string
	cgroups      map[string]runtime.CgroupStats
	ifaces       []runtime.InterfaceStats
	stopped      []string
	removed      []string
	pulled       []string
	events       []runtime.ContainerEvent
	// reopened are the containers whose logs were reopened.
	reopened []string
	rmis     []string
}

// FinalStatus has the container exited, as a stopped one's record is.
func (f *fakeRuntime) FinalStatus(_ context.Context, id string) (runtime.ContainerStatus, error) {
	for i, c := range f.containers {
		if c.ID == id {
			f.containers[i].State = runtime.StateExited
			return f.containers[i], nil
		}
	}
	return runtime.ContainerStatus{}, errdefs.ErrNotFound
}

func (f *fakeRuntime) RemoveContainerKeepingLogs(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	for i, c := range f.containers {
		if c.ID == id {
			f.containers = append(f.containers[:i], f.containers[i+1:]...)
			break
		}
	}
	return nil
}

func (f *fakeRuntime) ContainerStats(context.Context) (map[string]runtime.ContainerStats, error) {
	return f.metrics, nil
}

func (f *fakeRuntime) ContainerInfo(_ context.Context, id string) (runtime.CRIContainerInfo, error) {
	return runtime.CRIContainerInfo{Pid: 42, SnapshotKey: id, Snapshotter: "overlayfs", RuntimeType: "io.containerd.runc.v2",
		Spec: &specs.Spec{Process: &specs.Process{Args: []string{"sleep", "1"}, OOMScoreAdj: ptr.To(1000)},
			Linux: &specs.Linux{Resources: &specs.LinuxResources{
				CPU:    &specs.LinuxCPU{Period: ptr.To[uint64](100000), Quota: ptr.To[int64](50000), Shares: ptr.To[uint64](512), Cpus: "0-1"},
				Memory: &specs.LinuxMemory{Limit: ptr.To[int64](1 << 20)},
			}}}}, nil
}

func (f *fakeRuntime) RootfsUsage(_ context.Context, id string) (runtime.DiskUsage, error) {
	if u, ok := f.layers[id]; ok {
		return u, nil
	}
	return runtime.DiskUsage{}, errdefs.ErrNotFound
}

func (f *fakeRuntime) PodCgroupNames(uid string, ids []string) (string, map[string]string, error) {
	out := map[string]string{}
	for _, id := range ids {
		out[id] = "pod" + uid + "/" + id
	}
	return "pod" + uid, out, nil
}
func (f *fakeRuntime) CgroupStats(name string) (runtime.CgroupStats, error) {
	st, ok := f.cgroups[name]
	if !ok {
		return st, errors.New("no cgroup")
	}
	return st, nil
}
func (f *fakeRuntime) PodNetworkStats(string) ([]runtime.InterfaceStats, error) { return f.ifaces, nil }

func (f *fakeRuntime) StopContainer(_ context.Context, id string, sig syscall.Signal, grace time.Duration) error {
	f.stopped = append(f.stopped, fmt.Sprintf("%s %d %s", id, sig, grace))
	return nil
}

func (f *fakeRuntime) Exec(_ context.Context, id string, cmd []string, eio runtime.ExecIO) (int, error) {
	fmt.Fprintf(eio.Stdout, "%s: %s", id, strings.Join(cmd, " "))
	fmt.Fprint(eio.Stderr, "warn")
	return 3, nil
}

// Attach writes what it reads from stdin to stdout.
func (f *fakeRuntime) Attach(_ context.Context, id string, eio runtime.ExecIO) error {
	fmt.Fprintf(eio.Stdout, "%s: ", id)
	_, err := io.Copy(eio.Stdout, eio.Stdin)
	return err
}

// DialPod connects to an echo of what it is sent, prefixed with the pod
// and port.
func (f *fakeRuntime) DialPod(_ context.Context, uid string, port int32) (net.Conn, error) {
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		fmt.Fprintf(b, "%s:%d ", uid, port)
		_, _ = io.Copy(b, b)
	}()
	return a, nil
}

// WatchContainerEvents sends the events given, then ends as a broken
// stream.
func (f *fakeRuntime) WatchContainerEvents(ctx context.Context, fn func(runtime.ContainerEvent)) error {
	for _, e := range f.events {
		if ctx.Err() != nil {
			return nil
		}
		fn(e)
	}
	return errors.New("stream broken")
}

func (f *fakeRuntime) ReopenContainerLog(id string) error {
	f.reopened = append(f.reopened, id)
	return nil
}

func (f *fakeRuntime) Version(context.Context) (string, error) { return "containerd://v2.2.9", nil }

func (f *fakeRuntime) Deprecations(context.Context) (map[string]string, error) {
	return f.deprecations, nil
}
func (f *fakeRuntime) RuntimeHandlers(context.Context) ([]runtime.RuntimeHandler, error) {
	return []runtime.RuntimeHandler{{Name: ""}, {Name: "runc", UserNamespaces: true}}, nil
}
func (f *fakeRuntime) SandboxRecords() ([]runtime.SandboxRecord, error) { return f.recs, nil }
func (f *fakeRuntime) ContainerPods(context.Context) (map[string]runtime.PodRef, error) {
	return f.refs, nil
}
func (f *fakeRuntime) ListContainers(_ context.Context, uid string) ([]runtime.ContainerStatus, error) {
	f.lists++
	if uid == "" {
		return f.containers, nil
	}
	var out []runtime.ContainerStatus
	for _, c := range f.containers {
		if c.PodUID == uid {
			out = append(out, c)
		}
	}
	return out, nil
}
func (f *fakeRuntime) ContainerStatus(_ context.Context, id string) (runtime.ContainerStatus, error) {
	for _, c := range f.containers {
		if c.ID == id {
			return c, nil
		}
	}
	return runtime.ContainerStatus{}, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
}
func (f *fakeRuntime) ContainerMounts(_ context.Context, id string) ([]runtime.Mount, error) {
	return f.mounts[id], nil
}
func (f *fakeRuntime) CRIImages(context.Context) ([]runtime.CRIImage, error) { return f.imgs, nil }

// PullCRIImage records the ref and what the credentials offer
// registry.example.
func (f *fakeRuntime) PullCRIImage(_ context.Context, ref string, creds runtime.Credentials) (string, error) {
	user, secret, err := creds("registry.example")
	if err != nil {
		return "", err
	}
	f.pulled = append(f.pulled, ref+" "+user+":"+secret)
	return cfgID, nil
}

func (f *fakeRuntime) RemoveImage(_ context.Context, id string) error {
	f.rmis = append(f.rmis, id)
	return nil
}
func (f *fakeRuntime) ImageFsDir(context.Context) (string, error) { return os.TempDir(), nil }

type fakeNetwork struct{ err error }

func (f fakeNetwork) Status() error { return f.err }
func (f fakeNetwork) ConfigInfo() runtime.CNIConfigInfo {
	return runtime.CNIConfigInfo{PluginConfDir: "/etc/cni/net.d", PluginMaxConfNum: 1, Prefix: "eth"}
}

var (
	created  = time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	started  = created.Add(time.Second)
	finished = started.Add(time.Minute)
)

const (
	webUID  = "11111111-aaaa-bbbb-cccc-000000000001"
	hostUID = "22222222-aaaa-bbbb-cccc-000000000002"
	goneUID = "33333333-aaaa-bbbb-cccc-000000000003"
	cfgID   = "sha256:c0ffee0000000000000000000000000000000000000000000000000000000000"
)

// node is a node running "web" (a pod network, two containers: one
// running, an init one that failed once), "host" (host network,
// shareProcessNamespace, a static pod's annotations) and the leftovers of
// "gone", a pod that ended before hostlet restarted: containers, no
// record, no pod.
func node() (fakePods, *fakeRuntime) {
	web := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: webUID,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "x"}},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			InitContainers:                []v1.Container{{Name: "init", Image: "busybox", TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile}},
			Containers: []v1.Container{{Name: "test_container", Image: "foo/image:v1",
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
				Ports: []v1.ContainerPort{{ContainerPort: 8001}}}},
		},
		Status: v1.PodStatus{
			StartTime: &metav1.Time{Time: created.Add(-time.Second)},
			InitContainerStatuses: []v1.ContainerStatus{{Name: "init", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 1, Message: "it failed", ContainerID: "containerd://init0"}}}},
		},
	}
	host := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "host", Namespace: "kube-system", UID: hostUID,
			Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.seen": "then"}},
		Spec: v1.PodSpec{HostNetwork: true, HostPID: false, ShareProcessNamespace: ptr.To(true)},
	}
	rt := &fakeRuntime{
		recs: []runtime.SandboxRecord{
			{Sandbox: runtime.Sandbox{UID: webUID, Namespace: "ns", Name: "web", IPs: []string{"10.88.0.5", "fd00::5"}, Handler: "runc"}, Ready: true, CreatedAt: created},
			{Sandbox: runtime.Sandbox{UID: hostUID, Namespace: "kube-system", Name: "host", HostNetwork: true, IPs: []string{"192.0.2.1"}, PausePID: 9}, Ready: false, CreatedAt: created.Add(time.Hour)},
		},
		refs: map[string]runtime.PodRef{
			webUID:  {UID: webUID, Namespace: "ns", Name: "web"},
			goneUID: {UID: goneUID, Namespace: "ns", Name: "gone", FirstCreated: created.Add(-time.Hour)},
		},
		containers: []runtime.ContainerStatus{
			{ID: "init0", Name: "init", PodUID: webUID, State: runtime.StateExited, CreatedAt: created, StartedAt: started, FinishedAt: finished,
				ExitCode: 1, ImageName: "busybox", ImageID: "docker.io/library/busybox@sha256:b0b0", LogPath: "/var/log/pods/ns_web_" + webUID + "/init/0.log"},
			{ID: "app1", Name: "test_container", PodUID: webUID, Attempt: 2, State: runtime.StateRunning, CreatedAt: finished, StartedAt: finished.Add(time.Second),
				ImageName: "foo/image:v1", ImageID: "docker.io/foo/image@sha256:f00", LogPath: "/logs/app/2.log",
				User: &runtime.User{UID: 1000, GID: 2000, SupplementalGroups: []uint32{2000, 3000}}},
			{ID: "gone0", Name: "c", PodUID: goneUID, State: runtime.StateExited, CreatedAt: created.Add(-time.Hour), ExitCode: 0},
		},
		mounts: map[string][]runtime.Mount{"app1": {
			{HostPath: "/data", ContainerPath: "/data", ReadOnly: true, RecursiveReadOnly: true, Propagation: runtime.PropagationHostToContainer},
			{HostPath: "/pods/etc-hosts", ContainerPath: "/etc/hosts"},
		}},
		imgs: []runtime.CRIImage{{
			StoredImage:  runtime.StoredImage{ID: "sha256:f00", Names: []string{"docker.io/foo/image:v1", "docker.io/foo/image@sha256:f00"}, Size: 1234},
			ConfigDigest: cfgID, UID: ptr.To[int64](0),
		}},
	}
	return fakePods{webUID: web, hostUID: host}, rt
}

func newServer() *server {
	pods, rt := node()
	return &server{cfg: Config{Pods: pods, Runtime: rt, Images: rt, Network: fakeNetwork{}, CgroupDriver: runtime.CgroupDriverSystemd}}
}

func sandboxesByName(items []*criapi.PodSandbox) map[string]*criapi.PodSandbox {
	out := map[string]*criapi.PodSandbox{}
	for _, s := range items {
		out[s.Metadata.Name] = s
	}
	return out
}

// Every pod with a record or containers is a sandbox: whole ones READY,
// the others NOTREADY; labels and annotations as the kubelet's.
func TestListPodSandbox(t *testing.T) {
	s := newServer()
	resp, err := s.ListPodSandbox(context.Background(), &criapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := sandboxesByName(resp.Items)
	if len(got) != 3 {
		t.Fatalf("sandboxes %v, want web, host, gone", got)
	}
	if resp.Items[0].Metadata.Name != "host" {
		t.Errorf("first listed %s, want the newest (host)", resp.Items[0].Metadata.Name)
	}
	web := got["web"]
	if web.Id != sandboxID(webUID) || len(web.Id) != 64 {
		t.Errorf("id %q", web.Id)
	}
	if web.State != criapi.PodSandboxState_SANDBOX_READY || web.CreatedAt != created.UnixNano() || web.RuntimeHandler != "runc" {
		t.Errorf("web: %v", web)
	}
	if m := web.Metadata; m.Namespace != "ns" || m.Uid != webUID || m.Attempt != 0 {
		t.Errorf("metadata %v", m)
	}
	wantLabels := map[string]string{"app": "web", labelPodName: "web", labelPodNamespace: "ns", labelPodUID: webUID}
	if !equal(web.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", web.Labels, wantLabels)
	}
	wantAnn := map[string]string{"note": "x", "kubernetes.io/config.source": "api", "kubernetes.io/config.seen": seen.Format(time.RFC3339Nano)}
	if !equal(web.Annotations, wantAnn) {
		t.Errorf("annotations %v, want %v", web.Annotations, wantAnn)
	}
	host := got["host"]
	if host.State != criapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("host: not whole, got %v", host.State)
	}
	if host.Annotations["kubernetes.io/config.source"] != "file" || host.Annotations["kubernetes.io/config.seen"] != "then" {
		t.Errorf("a static pod's source annotations are its own: %v", host.Annotations)
	}
	gone := got["gone"]
	if gone.State != criapi.PodSandboxState_SANDBOX_NOTREADY || gone.CreatedAt != created.Add(-time.Hour).UnixNano() {
		t.Errorf("gone: %v", gone)
	}
	if !equal(gone.Labels, map[string]string{labelPodName: "gone", labelPodNamespace: "ns", labelPodUID: goneUID}) || len(gone.Annotations) != 0 {
		t.Errorf("gone: labels %v annotations %v", gone.Labels, gone.Annotations)
	}
}

func TestFilterPodSandbox(t *testing.T) {
	s := newServer()
	for _, tc := range []struct {
		name   string
		filter *criapi.PodSandboxFilter
		want   []string
	}{
		{"id", &criapi.PodSandboxFilter{Id: sandboxID(hostUID)}, []string{"host"}},
		{"id prefix", &criapi.PodSandboxFilter{Id: sandboxID(webUID)[:13]}, []string{"web"}},
		{"unknown id", &criapi.PodSandboxFilter{Id: "ffff"}, nil},
		{"ready", &criapi.PodSandboxFilter{State: &criapi.PodSandboxStateValue{State: criapi.PodSandboxState_SANDBOX_READY}}, []string{"web"}},
		{"labels", &criapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodNamespace: "ns"}}, []string{"gone", "web"}},
		{"labels, all of them", &criapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodNamespace: "ns", "app": "web"}}, []string{"web"}},
	} {
		resp, err := s.ListPodSandbox(context.Background(), &criapi.ListPodSandboxRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, it := range resp.Items {
			names = append(names, it.Metadata.Name)
		}
		if strings.Join(sorted(names), ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v, want %v", tc.name, names, tc.want)
		}
	}
}

func TestPodSandboxStatus(t *testing.T) {
	s := newServer()
	ctx := context.Background()
	resp, err := s.PodSandboxStatus(ctx, &criapi.PodSandboxStatusRequest{PodSandboxId: sandboxID(webUID)[:13]})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Status
	if st.Id != sandboxID(webUID) || st.Network.Ip != "10.88.0.5" || len(st.Network.AdditionalIps) != 1 || st.Network.AdditionalIps[0].Ip != "fd00::5" {
		t.Errorf("web: %v", st)
	}
	ns := st.Linux.Namespaces.Options
	if ns.Network != criapi.NamespaceMode_POD || ns.Ipc != criapi.NamespaceMode_POD || ns.Pid != criapi.NamespaceMode_CONTAINER || ns.UsernsOptions.Mode != criapi.NamespaceMode_NODE {
		t.Errorf("web namespaces: %v", ns)
	}
	resp, err = s.PodSandboxStatus(ctx, &criapi.PodSandboxStatusRequest{PodSandboxId: sandboxID(hostUID)})
	if err != nil {
		t.Fatal(err)
	}
	// containerd's CRI reports no IP for a pod on the host's network.
	if st := resp.Status; st.Network.Ip != "" || st.Linux.Namespaces.Options.Network != criapi.NamespaceMode_NODE || st.Linux.Namespaces.Options.Pid != criapi.NamespaceMode_POD {
		t.Errorf("host: %v", st)
	}
	if _, err := s.PodSandboxStatus(ctx, &criapi.PodSandboxStatusRequest{PodSandboxId: "ffff"}); status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Errorf("unknown sandbox: %v", err)
	}
}

func TestListContainers(t *testing.T) {
	s := newServer()
	ctx := context.Background()
	resp, err := s.ListContainers(ctx, &criapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Containers) != 3 || resp.Containers[0].Id != "app1" {
		t.Fatalf("containers %v, newest first", resp.Containers)
	}
	app := resp.Containers[0]
	if app.PodSandboxId != sandboxID(webUID) || app.Metadata.Name != "test_container" || app.Metadata.Attempt != 2 ||
		app.State != criapi.ContainerState_CONTAINER_RUNNING || app.CreatedAt != finished.UnixNano() {
		t.Errorf("app: %v", app)
	}
	// The image as the kubelet gives CreateContainer: its ID.
	if app.Image.Image != cfgID || app.ImageRef != cfgID || app.Image.UserSpecifiedImage != "foo/image:v1" {
		t.Errorf("app image %v ref %q", app.Image, app.ImageRef)
	}
	wantLabels := map[string]string{labelPodName: "web", labelPodNamespace: "ns", labelPodUID: webUID, labelContainerName: "test_container"}
	if !equal(app.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", app.Labels, wantLabels)
	}
	wantAnn := map[string]string{
		annotationHash:                     "8e45cbd0", // the kubelet's TestHashContainer
		annotationRestartCount:             "2",
		annotationTerminationMessagePath:   "/dev/termination-log",
		annotationTerminationMessagePolicy: "FallbackToLogsOnError",
		annotationTerminationGracePeriod:   "30",
		annotationPorts:                    `[{"containerPort":8001}]`,
	}
	if !equal(app.Annotations, wantAnn) {
		t.Errorf("annotations %v, want %v", app.Annotations, wantAnn)
	}
	for _, tc := range []struct {
		name   string
		filter *criapi.ContainerFilter
		want   string
	}{
		{"id prefix", &criapi.ContainerFilter{Id: "app"}, "app1"},
		{"sandbox prefix", &criapi.ContainerFilter{PodSandboxId: sandboxID(webUID)[:13]}, "app1,init0"},
		{"exited", &criapi.ContainerFilter{State: &criapi.ContainerStateValue{State: criapi.ContainerState_CONTAINER_EXITED}}, "gone0,init0"},
		{"label", &criapi.ContainerFilter{LabelSelector: map[string]string{labelContainerName: "init"}}, "init0"},
		{"unknown sandbox", &criapi.ContainerFilter{PodSandboxId: "ffff"}, ""},
	} {
		resp, err := s.ListContainers(ctx, &criapi.ListContainersRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range resp.Containers {
			ids = append(ids, c.Id)
		}
		if got := strings.Join(sorted(ids), ","); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestContainerStatus(t *testing.T) {
	s := newServer()
	ctx := context.Background()
	resp, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: "app"})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Status
	// The image by its first tag alone and image_ref its repo digest, as
	// containerd's with the image on the node (the pod status's image and
	// imageID).
	if st.Id != "app1" || st.Image.Image != "docker.io/foo/image:v1" || st.Image.UserSpecifiedImage != "" || st.ImageRef != "docker.io/foo/image@sha256:f00" ||
		st.StartedAt != finished.Add(time.Second).UnixNano() || st.FinishedAt != 0 || st.LogPath != "/logs/app/2.log" {
		t.Errorf("app: %v", st)
	}
	if u := st.User.Linux; u == nil || u.Uid != 1000 || u.Gid != 2000 || len(u.SupplementalGroups) != 2 {
		t.Errorf("user %v", st.User)
	}
	// Its resources as its OCI spec has them.
	if l := st.Resources.GetLinux(); l.GetCpuPeriod() != 100000 || l.GetCpuQuota() != 50000 || l.GetCpuShares() != 512 || l.GetCpusetCpus() != "0-1" ||
		l.GetMemoryLimitInBytes() != 1<<20 || l.GetMemorySwapLimitInBytes() != 0 || l.GetOomScoreAdj() != 1000 {
		t.Errorf("resources %v", st.Resources)
	}
	if len(st.Mounts) != 2 || !st.Mounts[0].Readonly || !st.Mounts[0].RecursiveReadOnly ||
		st.Mounts[0].Propagation != criapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER || st.Mounts[1].ContainerPath != "/etc/hosts" {
		t.Errorf("mounts %v", st.Mounts)
	}
	resp, err = s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: "init0"})
	if err != nil {
		t.Fatal(err)
	}
	st = resp.Status
	// Its image is not on the node: named as the pod spec does.
	if st.Image.Image != "docker.io/library/busybox:latest" || st.Image.UserSpecifiedImage != "busybox" || st.ImageRef != "docker.io/library/busybox@sha256:b0b0" {
		t.Errorf("init's image: %v, ref %s", st.Image, st.ImageRef)
	}
	if st.State != criapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 1 || st.Reason != "Error" || st.Message != "" ||
		st.StartedAt != started.UnixNano() || st.FinishedAt != finished.UnixNano() {
		t.Errorf("init: %v", st)
	}
	resp, err = s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: "gone0"})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Status; st.Reason != "Completed" || st.Labels[labelPodName] != "gone" || len(st.Annotations) != 1 {
		t.Errorf("gone: %v", st)
	}
	if resp.Info != nil {
		t.Errorf("info without verbose: %v", resp.Info)
	}
	// Verbose: containerd's ContainerInfo under "info".
	resp, err = s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: "app1", Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		SandboxID, SnapshotKey, Snapshotter, RuntimeType string
		Pid                                              uint32
		Removing                                         bool
		Config                                           struct {
			Metadata struct{ Name string }
			Image    struct {
				Image              string
				UserSpecifiedImage string `json:"user_specified_image"`
			}
			LogPath string `json:"log_path"`
			Labels  map[string]string
			Mounts  []struct {
				ContainerPath string `json:"container_path"`
			}
		}
		RuntimeSpec struct{ Process struct{ Args []string } }
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("%v: %q", err, resp.Info)
	}
	if info.SandboxID != sandboxID(webUID) || info.Pid != 42 || info.SnapshotKey != "app1" || info.Snapshotter != "overlayfs" ||
		info.RuntimeType != "io.containerd.runc.v2" || info.Config.Metadata.Name != "test_container" || info.Config.Image.Image != cfgID ||
		info.Config.Image.UserSpecifiedImage != "foo/image:v1" || info.Config.LogPath != "app/2.log" || info.Config.Labels[labelPodUID] != webUID ||
		len(info.Config.Mounts) != 2 || len(info.RuntimeSpec.Process.Args) != 2 {
		t.Errorf("verbose info: %+v\n%s", info, resp.Info["info"])
	}
	if _, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: "nope"}); status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Errorf("unknown container: %v", err)
	}
}

// A full id is asked of the runtime alone; only a prefix lists the node's
// containers (each of whose tasks is asked).
func TestContainerStatusFullID(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	full := strings.Repeat("ab", 32)
	c := rt.containers[1]
	c.ID = full
	rt.containers = append(rt.containers, c)
	ctx := context.Background()
	resp, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: full})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.Id != full || resp.Status.Labels[labelPodName] != "web" || rt.lists != 0 {
		t.Errorf("full id: %v, %d lists", resp.Status, rt.lists)
	}
	if _, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: strings.Repeat("cd", 32)}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown full id: %v", err)
	}
	resp, err = s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: "abab"})
	if err != nil || resp.Status.Id != full || rt.lists != 1 {
		t.Errorf("prefix: %v, %v, %d lists", resp, err, rt.lists)
	}
	for id, want := range map[string]bool{full: true, strings.ToUpper(full): false, full[:63]: false, full[:63] + "g": false} {
		if isFullID(id) != want {
			t.Errorf("isFullID(%q) != %v", id, want)
		}
	}
}

// Stats are every container's, as containerd's CRI lists them: its
// writable layer on the image filesystem (measured, kept for layerPeriod;
// 0 with no timestamp when it cannot be), and a running one's metrics with
// the memory its limit leaves; usageNanoCores the rate since the previous
// sample, 0 on the first.
func TestContainerStats(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	t0 := time.Now()
	rt.metrics = map[string]runtime.ContainerStats{"app1": {Time: t0, CPUUsageNanos: 1e9, WorkingSet: 100, MemoryUsage: 200, RSS: 50, PageFaults: 7,
		MemoryLimit: 1000}}
	rt.layers = map[string]runtime.DiskUsage{"app1": {Bytes: 4096, Inodes: 3}}
	ctx := context.Background()
	resp, err := s.ListContainerStats(ctx, &criapi.ListContainerStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*criapi.ContainerStats{}
	for _, st := range resp.Stats {
		byID[st.Attributes.Id] = st
	}
	if len(resp.Stats) != len(rt.containers) || byID["app1"] == nil || byID["init0"] == nil {
		t.Fatalf("stats %v", resp.Stats)
	}
	st := byID["app1"]
	if st.Attributes.Metadata.Name != "test_container" || st.Cpu.UsageCoreNanoSeconds.Value != 1e9 ||
		st.Cpu.UsageNanoCores == nil || st.Cpu.UsageNanoCores.Value != 0 || st.Memory.WorkingSetBytes.Value != 100 || st.Memory.UsageBytes.Value != 200 ||
		st.Memory.RssBytes.Value != 50 || st.Memory.PageFaults.Value != 7 || st.Memory.AvailableBytes.GetValue() != 900 {
		t.Errorf("first: %v", st)
	}
	fsDir, _ := rt.ImageFsDir(ctx)
	if l := st.WritableLayer; l.GetFsId().GetMountpoint() != fsDir || l.GetUsedBytes().GetValue() != 4096 || l.GetInodesUsed().GetValue() != 3 || l.GetTimestamp() == 0 {
		t.Errorf("app1's writable layer: %v", l)
	}
	// init0 is exited: no task, its writable layer only (not measured).
	if ex := byID["init0"]; ex.Cpu != nil || ex.Memory != nil || ex.WritableLayer.GetFsId().GetMountpoint() != fsDir ||
		ex.WritableLayer.GetTimestamp() != 0 || ex.WritableLayer.GetUsedBytes() == nil {
		t.Errorf("exited: %v", ex)
	}
	rt.metrics["app1"] = runtime.ContainerStats{Time: t0.Add(2 * time.Second), CPUUsageNanos: 2e9}
	rt.layers["app1"] = runtime.DiskUsage{Bytes: 8192}
	one, err := s.ContainerStats(ctx, &criapi.ContainerStatsRequest{ContainerId: "app1"})
	if err != nil {
		t.Fatal(err)
	}
	if nc := one.Stats.Cpu.UsageNanoCores; nc == nil || nc.Value != 5e8 {
		t.Errorf("nano cores %v", nc)
	}
	if one.Stats.Memory.AvailableBytes.GetValue() != 0 {
		t.Errorf("no limit: available %v", one.Stats.Memory.AvailableBytes)
	}
	if u := one.Stats.WritableLayer.GetUsedBytes().GetValue(); u != 4096 {
		t.Errorf("writable layer measured again within %v: %d", layerPeriod, u)
	}
	// ContainerStats of an exited one: no task, no stats.
	if _, err := s.ContainerStats(ctx, &criapi.ContainerStatsRequest{ContainerId: "init0"}); status.Code(err) != codes.NotFound {
		t.Errorf("exited: %v", err)
	}
}

// A ready sandbox's stats are its pod cgroup's (no CPU rate, the
// hierarchy's page faults, as containerd's), eth0's counters (no
// timestamp) and its containers' stats; a stopped one has none.
func TestPodSandboxStats(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	now := time.Now()
	rt.metrics = map[string]runtime.ContainerStats{"app1": {Time: now, CPUUsageNanos: 5, WorkingSet: 10}}
	rt.cgroups = map[string]runtime.CgroupStats{
		"pod" + webUID: {Time: now, CPU: runtime.CgroupCPU{Total: 7e9}, Memory: runtime.CgroupMemoryStats{WorkingSet: 100, Usage: 300, RSS: 50,
			PageFaults: 1, TotalPageFaults: 40, TotalMajorPageFaults: 2},
			Spec: runtime.CgroupSpec{HasMemory: true, MemoryLimit: 1000}},
		"pod" + webUID + "/app1": {Threads: 3},
	}
	rt.ifaces = []runtime.InterfaceStats{{Name: "eth0", RxBytes: 11, TxBytes: 22}}
	ctx := context.Background()
	resp, err := s.PodSandboxStats(ctx, &criapi.PodSandboxStatsRequest{PodSandboxId: sandboxID(webUID)[:10]})
	if err != nil {
		t.Fatal(err)
	}
	l := resp.Stats.Linux
	if resp.Stats.Attributes.Id != sandboxID(webUID) || resp.Stats.Attributes.Metadata.Name != "web" || l.Cpu.UsageCoreNanoSeconds.Value != 7e9 ||
		l.Cpu.UsageNanoCores != nil || l.Memory.WorkingSetBytes.Value != 100 || l.Memory.AvailableBytes.Value != 900 ||
		l.Memory.PageFaults.GetValue() != 40 || l.Memory.MajorPageFaults.GetValue() != 2 || l.Network.Timestamp != 0 ||
		l.Network.DefaultInterface.Name != "eth0" || l.Network.DefaultInterface.RxBytes.Value != 11 || l.Process.ProcessCount.Value != 3 ||
		len(l.Containers) != 2 {
		t.Errorf("web: %v", resp.Stats)
	}
	if _, err := s.PodSandboxStats(ctx, &criapi.PodSandboxStatsRequest{PodSandboxId: sandboxID(hostUID)}); status.Code(err) != codes.Unavailable {
		t.Errorf("stopped sandbox: %v", err)
	}
	list, err := s.ListPodSandboxStats(ctx, &criapi.ListPodSandboxStatsRequest{})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != sandboxID(webUID) {
		t.Errorf("list: %v, %v", list, err)
	}
	list, err = s.ListPodSandboxStats(ctx, &criapi.ListPodSandboxStatsRequest{Filter: &criapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "other"}}})
	if err != nil || len(list.Stats) != 0 {
		t.Errorf("list by label: %v, %v", list, err)
	}
}

// StopContainer stops a running container of a pod through the runtime;
// an exited one is left be; an id not of hostlet's pods is not found.
func TestStopContainer(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	ctx := context.Background()
	if _, err := s.StopContainer(ctx, &criapi.StopContainerRequest{ContainerId: "app", Timeout: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopContainer(ctx, &criapi.StopContainerRequest{ContainerId: "init0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopContainer(ctx, &criapi.StopContainerRequest{ContainerId: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("not hostlet's: %v", err)
	}
	if len(rt.stopped) != 1 || rt.stopped[0] != "app1 15 2s" {
		t.Errorf("stopped %v", rt.stopped)
	}
}

// RemoveContainer removes an exited container, and a running one once
// stopped at once (SIGKILL), the pod's worker told of the exit first; an
// id not found is no error, as containerd's; a created one (being
// started) is refused.
func TestRemoveContainer(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	var exits []string
	s.cfg.Pods = exitsPods{fakePods: s.cfg.Pods.(fakePods), exits: &exits}
	ctx := context.Background()
	for _, id := range []string{"init0", "app1", "app1", "other"} {
		if _, err := s.RemoveContainer(ctx, &criapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if strings.Join(rt.removed, ",") != "init0,app1" {
		t.Errorf("removed %v", rt.removed)
	}
	if len(rt.stopped) != 1 || rt.stopped[0] != "app1 9 0s" {
		t.Errorf("stopped %v", rt.stopped)
	}
	if strings.Join(exits, ",") != "init0 exited,app1 exited" {
		t.Errorf("exits told %v", exits)
	}
	rt.containers = append(rt.containers, runtime.ContainerStatus{ID: "new0", Name: "c", PodUID: webUID, State: runtime.StateCreated})
	if _, err := s.RemoveContainer(ctx, &criapi.RemoveContainerRequest{ContainerId: "new0"}); err == nil || !strings.Contains(err.Error(), "starting state") {
		t.Errorf("created: %v", err)
	}
}

// ExecSync gathers a command's output and exit code in a running
// container; an exited one is refused.
func TestExecSync(t *testing.T) {
	s := newServer()
	ctx := context.Background()
	resp, err := s.ExecSync(ctx, &criapi.ExecSyncRequest{ContainerId: "app", Cmd: []string{"echo", "hi"}, Timeout: 5})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Stdout) != "app1: echo hi" || string(resp.Stderr) != "warn" || resp.ExitCode != 3 {
		t.Errorf("exec: %v", resp)
	}
	if _, err := s.ExecSync(ctx, &criapi.ExecSyncRequest{ContainerId: "init0", Cmd: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "CONTAINER_EXITED") {
		t.Errorf("exited: %v", err)
	}
}

// PullImage offers the request's credentials (containerd's reading of
// them) and answers the image's config digest.
func TestPullImage(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	ctx := context.Background()
	for _, auth := range []*criapi.AuthConfig{
		nil,
		{Username: "u", Password: "p"},
		{Auth: base64.StdEncoding.EncodeToString([]byte("a:b\x00"))},
		{IdentityToken: "tok"},
		{Username: "u", Password: "p", ServerAddress: "https://registry.example"},
		{Username: "u", Password: "p", ServerAddress: "https://other.example"},
		{Username: "u", Password: "p", ServerAddress: "registry.example"},
	} {
		resp, err := s.PullImage(ctx, &criapi.PullImageRequest{Image: &criapi.ImageSpec{Image: "foo/image:v1"}, Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		if resp.ImageRef != cfgID {
			t.Errorf("image ref %q", resp.ImageRef)
		}
	}
	want := "foo/image:v1 :,foo/image:v1 u:p,foo/image:v1 a:b,foo/image:v1 :tok,foo/image:v1 u:p,foo/image:v1 :,foo/image:v1 :"
	if got := strings.Join(rt.pulled, ","); got != want {
		t.Errorf("pulled %s\nwant   %s", got, want)
	}
	if _, err := s.PullImage(ctx, &criapi.PullImageRequest{Image: &criapi.ImageSpec{Image: "x"}, Auth: &criapi.AuthConfig{Auth: "bm9jb2xvbg=="}}); err == nil {
		t.Error("auth without a colon: no error")
	}
}

// RemoveImage removes the image by any name or ID of it, by its target
// digest; one not found is no error.
func TestRemoveImage(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	ctx := context.Background()
	for _, ref := range []string{"foo/image:v1", "c0ffee", "nothere:v1"} {
		if _, err := s.RemoveImage(ctx, &criapi.RemoveImageRequest{Image: &criapi.ImageSpec{Image: ref}}); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(rt.rmis, ",") != "sha256:f00,sha256:f00" {
		t.Errorf("removed %v", rt.rmis)
	}
}

// Exec and Attach answer URLs of the streaming server, for running
// containers only; a session through them (the client-go SPDY client, as
// crictl's) runs in the runtime, a non-zero exit its exit code.
func TestStreaming(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newServer()
	streams, err := startStreams(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	s.streams = streams
	if _, err := s.Exec(ctx, &criapi.ExecRequest{ContainerId: "init0", Cmd: []string{"true"}, Stdout: true}); err == nil || !strings.Contains(err.Error(), "CONTAINER_EXITED") {
		t.Errorf("exec into an exited container: %v", err)
	}
	stream := func(u string, opts remotecommand.StreamOptions) error {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		if parsed.Hostname() != "127.0.0.1" {
			t.Errorf("URL %s not on loopback", u)
		}
		ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", parsed)
		if err != nil {
			t.Fatal(err)
		}
		return ex.StreamWithContext(ctx, opts)
	}
	resp, err := s.Exec(ctx, &criapi.ExecRequest{ContainerId: "app", Cmd: []string{"echo", "hi"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = stream(resp.Url, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	var exit utilexec.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 3 || stdout.String() != "app1: echo hi" || stderr.String() != "warn" {
		t.Errorf("exec: %v, %q, %q", err, stdout.String(), stderr.String())
	}
	// A token is good once.
	if err := stream(resp.Url, remotecommand.StreamOptions{Stdout: &stdout}); err == nil {
		t.Error("a URL used twice")
	}
	att, err := s.Attach(ctx, &criapi.AttachRequest{ContainerId: "app", Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := stream(att.Url, remotecommand.StreamOptions{Stdin: strings.NewReader("typed"), Stdout: &stdout}); err != nil || stdout.String() != "app1: typed" {
		t.Errorf("attach: %v, %q", err, stdout.String())
	}
	webID := sandboxID(webUID)
	if _, err := s.PortForward(ctx, &criapi.PortForwardRequest{PodSandboxId: sandboxID(hostUID)}); err == nil {
		t.Error("port-forward into a sandbox not ready: no error")
	}
	if pf, err := s.PortForward(ctx, &criapi.PortForwardRequest{PodSandboxId: webID[:12], Port: []int32{80}}); err != nil || !strings.Contains(pf.Url, "/portforward/") {
		t.Errorf("port-forward: %v %v", pf, err)
	}
}

// A forwarded stream reaches the pod's port and is copied both ways.
func TestPortForwardStream(t *testing.T) {
	s := newServer()
	local, remote := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- streamRuntime{s}.PortForward(context.Background(), sandboxID(webUID), 8080, remote) }()
	if _, err := local.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(webUID)+len(":8080 ping"))
	if _, err := io.ReadFull(local, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != webUID+":8080 ping" {
		t.Errorf("forwarded %q", buf)
	}
	local.Close()
	if err := <-done; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("port-forward ended: %v", err)
	}
	if err := (streamRuntime{s}).PortForward(context.Background(), sandboxID(webUID), 70000, remote); err == nil {
		t.Error("port 70000: no error")
	}
}

type eventStream struct {
	grpc.ServerStream
	sent []*criapi.ContainerEventResponse
}

func (e *eventStream) Context() context.Context { return context.Background() }
func (e *eventStream) Send(r *criapi.ContainerEventResponse) error {
	e.sent = append(e.sent, r)
	return nil
}

// GetContainerEvents sends each container event with its pod's sandbox
// status and containers' statuses, the types as CRI's, and the
// sandboxes' events under the sandbox's id; a pod the view no longer has
// gets a NOTREADY status while the node knows it (none otherwise: evented
// PLEG skips it) and, once, a sandbox deletion after; the stream ends when
// the runtime's breaks.
func TestGetContainerEvents(t *testing.T) {
	const endedUID = "55555555-aaaa-bbbb-cccc-000000000005"
	s := newServer()
	s.cfg.Pods.(fakePods)[endedUID] = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ended", Namespace: "ns", UID: endedUID}}
	rt := s.cfg.Runtime.(*fakeRuntime)
	rt.events = []runtime.ContainerEvent{
		{PodUID: webUID, Type: runtime.ContainerStarted},
		{ID: "app1", PodUID: webUID, Type: runtime.ContainerCreated},
		{ID: "app1", PodUID: webUID, Type: runtime.ContainerStarted},
		{ID: "app1", PodUID: webUID, Type: runtime.ContainerStopped},
		{ID: "init0", PodUID: webUID, Type: runtime.ContainerDeleted},
		{ID: "x", PodUID: "44444444-aaaa-bbbb-cccc-000000000004", Type: runtime.ContainerDeleted},
		{PodUID: endedUID, Type: runtime.ContainerStopped},
		{ID: "late", PodUID: endedUID, Type: runtime.ContainerDeleted},
	}
	var stream eventStream
	if err := s.GetContainerEvents(&criapi.GetEventsRequest{}, &stream); err == nil || err.Error() != "stream broken" {
		t.Errorf("stream ended with %v", err)
	}
	type sent struct {
		id, uid string
		typ     criapi.ContainerEventType
		state   criapi.PodSandboxState
		n       int
	}
	var got []sent
	for _, e := range stream.sent {
		if e.CreatedAt == 0 {
			t.Errorf("no time: %v", e)
		}
		got = append(got, sent{e.ContainerId, e.PodSandboxStatus.GetMetadata().GetUid(), e.ContainerEventType, e.PodSandboxStatus.GetState(), len(e.ContainersStatuses)})
	}
	ready, notReady := criapi.PodSandboxState_SANDBOX_READY, criapi.PodSandboxState_SANDBOX_NOTREADY
	none := criapi.PodSandboxState(0) // no sandbox status
	want := []sent{
		{sandboxID(webUID), webUID, criapi.ContainerEventType_CONTAINER_STARTED_EVENT, ready, 2},
		{"app1", webUID, criapi.ContainerEventType_CONTAINER_CREATED_EVENT, ready, 2},
		{"app1", webUID, criapi.ContainerEventType_CONTAINER_STARTED_EVENT, ready, 2},
		{"app1", webUID, criapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ready, 2},
		{"init0", webUID, criapi.ContainerEventType_CONTAINER_DELETED_EVENT, ready, 2},
		{"x", "", criapi.ContainerEventType_CONTAINER_DELETED_EVENT, none, 0},
		{sandboxID("44444444-aaaa-bbbb-cccc-000000000004"), "", criapi.ContainerEventType_CONTAINER_DELETED_EVENT, none, 0},
		{sandboxID(endedUID), endedUID, criapi.ContainerEventType_CONTAINER_STOPPED_EVENT, notReady, 0},
		{sandboxID(endedUID), "", criapi.ContainerEventType_CONTAINER_DELETED_EVENT, none, 0},
		{"late", endedUID, criapi.ContainerEventType_CONTAINER_DELETED_EVENT, notReady, 0},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sent\n%v\nwant\n%v", got, want)
	}
}

func TestImages(t *testing.T) {
	s := newServer()
	ctx := context.Background()
	resp, err := s.ListImages(ctx, &criapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Images) != 1 {
		t.Fatalf("images %v", resp.Images)
	}
	img := resp.Images[0]
	if img.Id != cfgID || img.Size != 1234 || img.Uid.GetValue() != 0 || img.Uid == nil ||
		strings.Join(img.RepoTags, ",") != "docker.io/foo/image:v1" || strings.Join(img.RepoDigests, ",") != "docker.io/foo/image@sha256:f00" {
		t.Errorf("image %v", img)
	}
	for _, ref := range []string{"foo/image:v1", "docker.io/foo/image:v1", cfgID, "c0ffee", "sha256:c0ff"} {
		r, err := s.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: ref}})
		if err != nil || r.Image.GetId() != cfgID {
			t.Errorf("ImageStatus(%s): %v %v", ref, r, err)
		}
	}
	// An image the node lacks: no image, no error.
	r, err := s.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: "busybox"}})
	if err != nil || r.Image != nil {
		t.Errorf("absent image: %v %v", r, err)
	}
	fs, err := s.ImageFsInfo(ctx, &criapi.ImageFsInfoRequest{})
	if err != nil || len(fs.ImageFilesystems) != 1 || fs.ImageFilesystems[0].FsId.Mountpoint != os.TempDir() || fs.ImageFilesystems[0].UsedBytes == nil {
		t.Errorf("image fs: %v %v", fs, err)
	}
}

// Served on a socket only root reaches, through the real client stubs:
// Version and Status as containerd's CRI, what hostlet does not do
// refused as Unimplemented with why.
func TestServe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "cri.sock")
	pods, rt := node()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := Serve(ctx, Config{Socket: socket, Pods: pods, Runtime: rt, Images: rt, Network: fakeNetwork{errors.New("no network config found in /etc/cni/net.d")},
		CgroupDriver: runtime.CgroupDriverSystemd})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, socket: 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", path, st.Mode().Perm(), err, want)
		}
	}
	conn, err := grpcsock.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := criapi.NewRuntimeServiceClient(conn)
	v, err := c.Version(ctx, &criapi.VersionRequest{})
	if err != nil || v.RuntimeName != "containerd" || v.RuntimeVersion != "v2.2.9" || v.RuntimeApiVersion != "v1" {
		t.Errorf("version %v %v", v, err)
	}
	st, err := c.Status(ctx, &criapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	conds := st.Status.Conditions
	if len(conds) != 3 || !conds[0].Status || conds[0].Type != criapi.RuntimeReady || conds[1].Status || conds[1].Reason != "NetworkPluginNotReady" ||
		conds[2].Type != "ContainerdHasNoDeprecationWarnings" || !conds[2].Status {
		t.Errorf("conditions %v", conds)
	}
	if st.Info["lastCNILoadStatus.default"] == "" || st.Info["lastCNILoadStatus.default"] != st.Info["lastCNILoadStatus"] ||
		!strings.Contains(st.Info["cniconfig"], `"PluginConfDir":"/etc/cni/net.d"`) {
		t.Errorf("info %v", st.Info)
	}
	if len(st.RuntimeHandlers) != 2 || st.RuntimeHandlers[1].Name != "runc" || !st.RuntimeHandlers[1].Features.UserNamespaces {
		t.Errorf("handlers %v", st.RuntimeHandlers)
	}
	if st.Info["lastCNILoadStatus"] == "OK" {
		t.Errorf("info %v", st.Info)
	}
	rc, err := c.RuntimeConfig(ctx, &criapi.RuntimeConfigRequest{})
	if err != nil || rc.Linux.CgroupDriver != criapi.CgroupDriver_SYSTEMD {
		t.Errorf("runtime config %v %v", rc, err)
	}
	_, err = c.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "only the pods the API server binds") {
		t.Errorf("RunPodSandbox: %v", err)
	}
	imgs, err := criapi.NewImageServiceClient(conn).ListImages(ctx, &criapi.ListImagesRequest{})
	if err != nil || len(imgs.Images) != 1 {
		t.Errorf("images %v %v", imgs, err)
	}
	if _, err := criapi.NewImageServiceClient(conn).PullImage(ctx, &criapi.PullImageRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("PullImage of nothing: %v", err)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// A verbose PodSandboxStatus has containerd's SandboxInfo keys: the
// process running with its namespace open while the sandbox is ready, and
// the kubelet's sandbox config as the node's state says it (hostname and
// DNS from the files written for the sandbox, the log directory its
// containers', ports, the pod cgroup, the security context).
func TestPodSandboxStatusVerbose(t *testing.T) {
	s := newServer()
	rt := s.cfg.Runtime.(*fakeRuntime)
	dir := t.TempDir()
	rt.recs[0].Dir, rt.recs[0].CgroupParent = dir, "/kubepods/besteffort/pod"+webUID
	if err := os.WriteFile(filepath.Join(dir, "etc-hostname"), []byte("web\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("search ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pods := s.cfg.Pods.(fakePods)
	pods[webUID].Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000),
		Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
	s.cfg.CFSQuota = CFSQuota{Period: 100000}
	ctx := context.Background()
	resp, err := s.PodSandboxStatus(ctx, &criapi.PodSandboxStatusRequest{PodSandboxId: sandboxID(webUID), Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(resp.Info["info"]), &keys); err != nil {
		t.Fatalf("%v: %q", err, resp.Info)
	}
	for _, k := range []string{"pid", "processStatus", "netNamespaceClosed", "image", "snapshotKey", "snapshotter", "runtimeType",
		"runtimeOptions", "config", "runtimeSpec", "cniResult", "sandboxMetadata"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no %s in %s", k, resp.Info["info"])
		}
	}
	if string(keys["processStatus"]) != `"running"` || string(keys["netNamespaceClosed"]) != "false" {
		t.Errorf("ready sandbox: %s", resp.Info["info"])
	}
	var cfg criapi.PodSandboxConfig
	if err := json.Unmarshal(keys["config"], &cfg); err != nil {
		t.Fatal(err)
	}
	sc := cfg.Linux.GetSecurityContext()
	if cfg.Metadata.GetName() != "web" || cfg.Hostname != "web" || cfg.LogDirectory != "/var/log/pods/ns_web_"+webUID ||
		len(cfg.DnsConfig.GetServers()) != 1 || len(cfg.DnsConfig.GetSearches()) != 2 || cfg.DnsConfig.GetOptions()[0] != "ndots:5" ||
		len(cfg.PortMappings) != 1 || cfg.PortMappings[0].ContainerPort != 8001 || cfg.Labels["app"] != "web" ||
		cfg.Linux.CgroupParent != "/kubepods/besteffort/pod"+webUID || cfg.Linux.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" || cfg.Linux.Sysctls["net.ipv4.ping_group_range"] != "0 2147483647" ||
		sc.GetRunAsUser().GetValue() != 1000 || len(sc.GetSupplementalGroups()) != 1 || sc.GetSupplementalGroups()[0] != 2000 ||
		sc.GetSeccomp().GetProfileType() != criapi.SecurityProfile_RuntimeDefault || sc.GetNamespaceOptions().GetNetwork() != criapi.NamespaceMode_POD {
		t.Errorf("config: %v", &cfg)
	}
	// No requests or limits: the least shares, the period without a quota;
	// no overhead.
	if r := cfg.Linux.Resources; r.GetCpuShares() != 2 || r.GetCpuPeriod() != 100000 || r.GetCpuQuota() != 0 || r.GetMemoryLimitInBytes() != 0 ||
		cfg.Linux.Overhead == nil || cfg.Linux.Overhead.GetCpuShares() != 0 {
		t.Errorf("resources %v, overhead %v", r, cfg.Linux.Overhead)
	}
	// A stopped one: its process deleted, its namespace closed.
	resp, err = s.PodSandboxStatus(ctx, &criapi.PodSandboxStatusRequest{PodSandboxId: sandboxID(hostUID), Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Info["info"], `"processStatus":"deleted","netNamespaceClosed":true`) {
		t.Errorf("stopped sandbox: %s", resp.Info["info"])
	}
}

// A sandbox's resources as the kubelet's calculateSandboxResources: the
// pod's requests as shares, its limits as quota and memory limit; the CPU
// limit's shares without a request; no period without quotas enforced.
func TestSandboxResources(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")}}},
		{Name: "b", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")}}},
	}}}
	// b's request defaults to its limit, as the API server defaults it.
	pod.Spec.Containers[1].Resources.Requests = pod.Spec.Containers[1].Resources.Limits.DeepCopy()
	r := sandboxResources(pod, CFSQuota{Period: 100000})
	if r.CpuShares != 768 || r.CpuPeriod != 100000 || r.CpuQuota != 100000 || r.MemoryLimitInBytes != 128<<20 {
		t.Errorf("resources %v", r)
	}
	lim := resource.MustParse("1")
	if r := linuxResources(nil, &lim, &resource.Quantity{}, CFSQuota{}); r.CpuShares != 1024 || r.CpuPeriod != 0 || r.CpuQuota != 0 {
		t.Errorf("limit only, quotas off: %v", r)
	}
}

// containerd's deprecation warnings make its condition false, with them
// as a JSON map; none, true.
func TestDeprecationCondition(t *testing.T) {
	c, err := deprecationCondition(map[string]string{"io.containerd.deprecation/cgroup-v1": "cgroup v1 is deprecated"})
	if err != nil || c.Status || c.Reason != "ContainerdHasDeprecationWarnings" || c.Message != `{"io.containerd.deprecation/cgroup-v1":"cgroup v1 is deprecated"}` {
		t.Errorf("with a warning: %v %v", c, err)
	}
	if c, err := deprecationCondition(nil); err != nil || !c.Status || c.Reason != "" || c.Type != "ContainerdHasNoDeprecationWarnings" {
		t.Errorf("without: %v %v", c, err)
	}
}

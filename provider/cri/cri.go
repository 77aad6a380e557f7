// Package cri serves a CRI view of the node (k8s.io/cri-api v1's
// RuntimeService and ImageService) on a root-only unix socket, from
// hostlet's own state: its pods (the provider's registry), their sandboxes
// and containers (runtime's records in containerd namespace hostlet, which
// carry no CRI plugin metadata) and images. crictl and the node agents
// that list containers through CRI see the node's pods as on a kubelet
// node. It is a view: hostlet runs only the pods the API server binds to
// it (and its static pods), so what would make or change a pod is refused.
package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/runtime"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/cri/streaming"
)

// Pods is what the view reads of the provider: the pods the node runs, by
// UID, with their latest status.
type Pods interface {
	GetPodByUID(ctx context.Context, uid types.UID) (*v1.Pod, error)
	// SeenAt is when the node first saw the pod (config.seen).
	SeenAt(uid types.UID) (time.Time, bool)
	// ContainerExited tells the pod's worker of a container's exit (it
	// ignores one it has), before RemoveContainer takes the container.
	ContainerExited(st runtime.ContainerStatus)
}

// Runtime is what the view reads of the runtime.
type Runtime interface {
	// Version is "containerd://<version>".
	Version(ctx context.Context) (string, error)
	// Deprecations are containerd's deprecation warnings by id.
	Deprecations(ctx context.Context) (map[string]string, error)
	RuntimeHandlers(ctx context.Context) ([]runtime.RuntimeHandler, error)
	SandboxRecords() ([]runtime.SandboxRecord, error)
	ContainerPods(ctx context.Context) (map[string]runtime.PodRef, error)
	ListContainers(ctx context.Context, podUID string) ([]runtime.ContainerStatus, error)
	ContainerStatus(ctx context.Context, id string) (runtime.ContainerStatus, error)
	ContainerMounts(ctx context.Context, id string) ([]runtime.Mount, error)
	// ContainerInfo is what a verbose ContainerStatus tells (pid, snapshot,
	// runtime, OCI spec).
	ContainerInfo(ctx context.Context, id string) (runtime.CRIContainerInfo, error)
	// ContainerStats samples every live task (/stats/summary's numbers).
	ContainerStats(ctx context.Context) (map[string]runtime.ContainerStats, error)
	// RootfsUsage measures a container's writable layer.
	RootfsUsage(ctx context.Context, id string) (runtime.DiskUsage, error)
	// PodCgroupNames, CgroupStats and PodNetworkStats are a sandbox's
	// figures (PodSandboxStats).
	PodCgroupNames(uid string, ids []string) (string, map[string]string, error)
	CgroupStats(name string) (runtime.CgroupStats, error)
	PodNetworkStats(uid string) ([]runtime.InterfaceStats, error)
	// StopContainer signals a container's task, SIGKILLs it after grace,
	// and returns once its exit is recorded: the pod's worker sees the
	// exit as any other (lifecycle's stop uses it too).
	StopContainer(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) error
	// Exec runs a command in a running container, as the kubelet API's
	// exec does, and returns its exit code.
	Exec(ctx context.Context, id string, cmd []string, eio runtime.ExecIO) (int, error)
	// Attach joins a running container's own stdio and DialPod connects to
	// a port of a pod's localhost, as the kubelet API's attach and
	// port-forward.
	Attach(ctx context.Context, id string, eio runtime.ExecIO) error
	DialPod(ctx context.Context, uid string, port int32) (net.Conn, error)
	// FinalStatus records a stopped container's exit and returns its
	// status; RemoveContainerKeepingLogs removes it, its logs left.
	FinalStatus(ctx context.Context, id string) (runtime.ContainerStatus, error)
	RemoveContainerKeepingLogs(ctx context.Context, id string) error
	// WatchContainerEvents calls fn with the pods' containers' events as
	// containerd publishes them, until ctx ends or the stream breaks.
	WatchContainerEvents(ctx context.Context, fn func(runtime.ContainerEvent)) error
	// ReopenContainerLog has a running container's log writer open its
	// log path anew.
	ReopenContainerLog(id string) error
}

// Images is what the image service reads.
type Images interface {
	CRIImages(ctx context.Context) ([]runtime.CRIImage, error)
	ImageFsDir(ctx context.Context) (string, error)
	// PullCRIImage pulls through the runtime's puller and returns the
	// image's config digest; RemoveImage removes every name of the image
	// whose names point to that (target) digest.
	PullCRIImage(ctx context.Context, ref string, creds runtime.Credentials) (string, error)
	RemoveImage(ctx context.Context, id string) error
}

// Network says whether pods can get a network (the CNI config's state):
// the runtime's NetworkReady condition.
type Network interface {
	Status() error
	// ConfigInfo is the CNI state as containerd's verbose status shows it.
	ConfigInfo() runtime.CNIConfigInfo
}

// Config is the socket and the sources.
type Config struct {
	// Socket is the unix socket served, in a directory only root reaches.
	Socket  string
	Pods    Pods
	Runtime Runtime
	Images  Images
	Network Network
	// CgroupDriver is the runtime's, runtime.CgroupDriverSystemd or
	// runtime.CgroupDriverCgroupfs.
	CgroupDriver string
	// CFSQuota is how the node enforces CPU limits (a sandbox config's
	// resources).
	CFSQuota CFSQuota
}

type server struct {
	criapi.UnimplementedRuntimeServiceServer
	criapi.UnimplementedImageServiceServer
	cfg Config
	// samples are the containers' previous CPU samples (usageNanoCores).
	samples cpuSamples
	// layers are the containers' writable layer measures (their stats).
	layers layerUsages
	// streams serves Exec's, Attach's and PortForward's URLs.
	streams streaming.Server
}

// Serve listens on the socket (a stale one from before is replaced) and
// serves until ctx ends, with the streaming server of its exec, attach
// and port-forward URLs. The socket answers for every container of the
// node, exec included: only root reaches it (the directory 0700,
// the socket 0600), as containerd's socket.
func Serve(ctx context.Context, cfg Config) error {
	dir := filepath.Dir(cfg.Socket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// MkdirAll leaves an existing directory's mode as it was.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	s := &server{cfg: cfg}
	// The streaming server ends with ctx, or at once when the socket is
	// not served.
	streamsCtx, stopStreams := context.WithCancel(ctx)
	served := false
	defer func() {
		if !served {
			stopStreams()
		}
	}()
	streams, err := startStreams(streamsCtx, s)
	if err != nil {
		return err
	}
	s.streams = streams
	if err := grpcsock.Serve(ctx, cfg.Socket, "cri", func(srv *grpc.Server) {
		criapi.RegisterRuntimeServiceServer(srv, s)
		criapi.RegisterImageServiceServer(srv, s)
	}); err != nil {
		return err
	}
	served = true
	return os.Chmod(cfg.Socket, 0o600)
}

// Version answers as containerd's CRI does (runtime_name "containerd", its
// version): the containers are containerd's, and the kubelet makes the
// node's containerRuntimeVersion ("containerd://v2.x") from these two
// fields, which hostlet's Node reports the same.
func (s *server) Version(ctx context.Context, _ *criapi.VersionRequest) (*criapi.VersionResponse, error) {
	v, err := s.cfg.Runtime.Version(ctx)
	if err != nil {
		return nil, fmt.Errorf("containerd's version: %w", err)
	}
	name, version, _ := strings.Cut(v, "://")
	return &criapi.VersionResponse{
		Version:           kubeAPIVersion,
		RuntimeName:       name,
		RuntimeVersion:    version,
		RuntimeApiVersion: "v1",
	}, nil
}

// kubeAPIVersion is what containerd's CRI answers as Version's version.
const kubeAPIVersion = "0.1.0"

// DefaultSocket is where the view is served unless --cri-socket says
// otherwise; join points crictl.yaml at it.
const DefaultSocket = "/run/hostlet/cri.sock"

// Status has containerd's conditions: RuntimeReady while containerd
// answers (hostlet's view of it), NetworkReady from the CNI config, and
// whether containerd warns of deprecations.
func (s *server) Status(ctx context.Context, r *criapi.StatusRequest) (*criapi.StatusResponse, error) {
	rt := &criapi.RuntimeCondition{Type: criapi.RuntimeReady, Status: true}
	handlers, err := s.cfg.Runtime.RuntimeHandlers(ctx)
	if err != nil {
		rt.Status, rt.Reason, rt.Message = false, "ContainerdNotReady", err.Error()
	}
	netErr := s.cfg.Network.Status()
	resp := &criapi.StatusResponse{
		Status:          &criapi.RuntimeStatus{Conditions: []*criapi.RuntimeCondition{rt, networkCondition(netErr)}},
		RuntimeHandlers: criHandlers(handlers),
		Features:        &criapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	}
	if r.GetVerbose() {
		status := "OK"
		if netErr != nil {
			status = netErr.Error()
		}
		golang, _ := json.Marshal(goruntime.Version())
		// The node's one network is CNI's default one, as containerd names
		// its load status.
		resp.Info = map[string]string{"golang": string(golang), "lastCNILoadStatus": status, "lastCNILoadStatus.default": status}
		if b, err := json.Marshal(s.cfg.Network.ConfigInfo()); err == nil {
			resp.Info["cniconfig"] = string(b)
		}
	}
	deprecations, err := s.cfg.Runtime.Deprecations(ctx)
	if err != nil {
		return nil, fmt.Errorf("containerd's deprecations: %w", err)
	}
	cond, err := deprecationCondition(deprecations)
	if err != nil {
		return nil, err
	}
	resp.Status.Conditions = append(resp.Status.Conditions, cond)
	return resp, nil
}

// deprecationCondition is containerd's CRI's
// ContainerdHasNoDeprecationWarnings: false with the warnings (a JSON map
// of id to message) when containerd has any.
func deprecationCondition(deprecations map[string]string) (*criapi.RuntimeCondition, error) {
	cond := &criapi.RuntimeCondition{Type: "ContainerdHasNoDeprecationWarnings", Status: true}
	if len(deprecations) > 0 {
		b, err := json.Marshal(deprecations)
		if err != nil {
			return nil, err
		}
		cond.Status, cond.Reason, cond.Message = false, "ContainerdHasDeprecationWarnings", string(b)
	}
	return cond, nil
}

// networkCondition is NetworkReady in containerd's words.
func networkCondition(err error) *criapi.RuntimeCondition {
	if err != nil {
		return &criapi.RuntimeCondition{Type: criapi.NetworkReady, Reason: "NetworkPluginNotReady",
			Message: fmt.Sprintf("Network plugin returns error: %v", err)}
	}
	return &criapi.RuntimeCondition{Type: criapi.NetworkReady, Status: true}
}

// criHandlers are the handlers hostlet runs pods with, the default one
// named "" (as containerd lists it), sorted by name.
func criHandlers(hs []runtime.RuntimeHandler) []*criapi.RuntimeHandler {
	out := make([]*criapi.RuntimeHandler, 0, len(hs))
	for _, h := range hs {
		out = append(out, &criapi.RuntimeHandler{Name: h.Name, Features: &criapi.RuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: h.RecursiveReadOnlyMounts, UserNamespaces: h.UserNamespaces,
		}})
	}
	return out
}

// RuntimeConfig says the cgroup driver, which the kubelet (and the node
// e2e suite) ask the runtime for rather than configure.
func (s *server) RuntimeConfig(context.Context, *criapi.RuntimeConfigRequest) (*criapi.RuntimeConfigResponse, error) {
	driver := criapi.CgroupDriver_CGROUPFS
	if s.cfg.CgroupDriver == runtime.CgroupDriverSystemd {
		driver = criapi.CgroupDriver_SYSTEMD
	}
	return &criapi.RuntimeConfigResponse{Linux: &criapi.LinuxRuntimeConfiguration{CgroupDriver: driver}}, nil
}

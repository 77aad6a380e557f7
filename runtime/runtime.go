// Package runtime is hostlet's side of containerd: images, pod sandboxes
// (network namespace + CNI), OCI specs, tasks, exec, logs and exit events.
package runtime

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Config says where containerd and the host-side files live.
type Config struct {
	// Endpoint of containerd, "unix:///run/containerd/containerd.sock" or a path.
	Endpoint string
	// Namespace in containerd holding hostlet's images and containers.
	Namespace string
	// RootDir holds pod dirs and network namespaces.
	RootDir string
	// PodLogsDir holds the pods' log directories (DefaultPodLogsDir when
	// empty), ContainerLogsDir the containers' symlinks to their logs
	// (DefaultContainerLogsDir when empty).
	PodLogsDir, ContainerLogsDir string
	// Executable is hostlet's own binary, run as the PID 1 of pods that
	// share their process namespace.
	Executable string
	// NodeIP is the pod IP of host-network pods.
	NodeIP string
	// CNI config and plugins.
	CNIConfDir  string
	CNIBinDirs  []string
	CNICacheDir string
	// CNIDefaultBridge, if set, is the bridge of the default pod network
	// (host-local over the node's pod CIDRs) used while CNIConfDir is empty.
	CNIDefaultBridge string
	// RegistryConfigDir holds containerd-style hosts.toml files per registry.
	RegistryConfigDir string
	// Snapshotter, if set ("stargz"), is the containerd proxy snapshotter
	// images are pulled lazily into (lazypull.go), SnapshotterCreds its
	// credentials socket.
	Snapshotter, SnapshotterCreds string
	// CDISpecDirs hold the CDI specs device names resolve against
	// (DefaultCDISpecDirs when empty).
	CDISpecDirs []string
	// Cgroups says how pods are placed in cgroups.
	Cgroups CgroupConfig
	// EventStream, if set, hears of containerd's event stream (the exit
	// watcher's): nil once it is subscribed after containerd answered, the
	// error when it breaks. The node's health check reads it.
	EventStream func(error)
	// TracerProvider, if set, traces every containerd gRPC call (its
	// client's stats handler), as the kubelet's CRI client does with its
	// tracing configuration; nil traces nothing.
	TracerProvider trace.TracerProvider
	// Mirror, if set, is the node-local registry mirror pulls try first
	// for content addressed by digest.
	Mirror PeerFetcher
}

// Runtime talks to one containerd.
type Runtime struct {
	client *containerd.Client
	ns     string
	// endpoint is containerd's socket path, as its shims are given it
	// (idleshims.go).
	endpoint   string
	rootDir    string
	executable string
	sinksMu    sync.Mutex
	sinks      map[string]*logSink
	// resumed is closed once ResumeLogs has followed again the output of
	// the containers that outlived the last hostlet: until then, attach
	// to one of them waits.
	resumed    chan struct{}
	resumeOnce sync.Once
	nodeIP     string
	network    *Network
	registries string
	mirror     PeerFetcher
	// snapshotter and snapshotterCreds: Config's (lazypull.go).
	snapshotter, snapshotterCreds string
	// held are the lazy pulls' credentials, in memory (lazycreds.go).
	held heldCredentials
	// usernsOnce checks once whether pods can have user namespaces.
	usernsOnce sync.Once
	usernsErr  error
	// rroOnce checks once whether recursive read-only mounts can be made
	// (rro.go).
	rroOnce sync.Once
	rro     bool

	cdi *cdiCache
	// sandboxWatchers hear the sandboxes' events (criview.go).
	sandboxWatchers sandboxWatchers

	// podLogsDir and containerLogsDir are where container logs and their
	// symlinks go (logpaths.go).
	podLogsDir, containerLogsDir string
	cgroups                      *Cgroups
	// gate and shims make bursts cheap: gate.go, shimgroups.go.
	gate  gate
	shims *shimGroups
	// bootID is the host's boot, recorded with crash-loop back-off
	// (backoff.go).
	bootID string
	// handlers are containerd's runtime handlers (handlers.go).
	handlers handlerTable
	// eventStream hears of the exit watcher's stream (Config.EventStream).
	eventStream func(error)
}

func New(cfg Config) (*Runtime, error) {
	net, err := NewNetwork(cfg.CNIConfDir, cfg.CNIBinDirs, cfg.CNICacheDir, cfg.CNIDefaultBridge)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"pods", "netns", "fifo"} {
		if err := os.MkdirAll(filepath.Join(cfg.RootDir, d), 0o750); err != nil {
			return nil, err
		}
	}
	podLogs, containerLogs := cmp.Or(cfg.PodLogsDir, DefaultPodLogsDir), cmp.Or(cfg.ContainerLogsDir, DefaultContainerLogsDir)
	for _, d := range []string{podLogs, containerLogs} {
		// Readable by the log collectors' DaemonSets, as the kubelet's.
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	cdiDirs := cfg.CDISpecDirs
	if len(cdiDirs) == 0 {
		cdiDirs = DefaultCDISpecDirs
	}
	// containerd's client reconnects by itself; connecting lazily lets hostlet
	// start (and report the runtime as down) while containerd is not up yet.
	client, err := containerd.New(strings.TrimPrefix(cfg.Endpoint, "unix://"),
		containerd.WithDefaultNamespace(cfg.Namespace),
		containerd.WithTimeout(0),
		containerd.WithExtraDialOpts(tracingDialOpts(cfg.TracerProvider)))
	if err != nil {
		return nil, fmt.Errorf("containerd client: %w", err)
	}
	conn, _ := client.Conn().(grpc.ClientConnInterface)
	cg, err := newCgroups(context.Background(), cfg.Cgroups, conn)
	if err != nil {
		client.Close()
		return nil, err
	}
	r := &Runtime{
		gate: newGate(),
		// As many shims open for new containers as CPUs: the gate's
		// concurrent creations land in different shims.
		shims:       newShimGroups("hostlet-"+newID()[:12], cpus()),
		cgroups:     cg,
		client:      client,
		ns:          cfg.Namespace,
		endpoint:    strings.TrimPrefix(cfg.Endpoint, "unix://"),
		rootDir:     cfg.RootDir,
		sinks:       map[string]*logSink{},
		resumed:     make(chan struct{}),
		executable:  cfg.Executable,
		nodeIP:      cfg.NodeIP,
		network:     net,
		registries:  cfg.RegistryConfigDir,
		mirror:      cfg.Mirror,
		snapshotter: cfg.Snapshotter, snapshotterCreds: cfg.SnapshotterCreds,
		cdi:         &cdiCache{dirs: cdiDirs},
		eventStream: func(error) {},

		podLogsDir: podLogs, containerLogsDir: containerLogs,
		bootID: readBootID(bootIDFile),
	}
	if cfg.EventStream != nil {
		r.eventStream = cfg.EventStream
	}
	return r, nil
}

func (r *Runtime) Close() error { return r.client.Close() }

// Network is the CNI side, for status checks.
func (r *Runtime) Network() *Network { return r.network }

// Version returns "containerd://<version>" as the kubelet reports the
// runtime: containerd's version as it was built (a release's is its tag,
// "v2.2.9"), which containerd's CRI answers unchanged.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := r.client.Version(ctx)
	if err != nil {
		return "", err
	}
	return "containerd://" + v.Version, nil
}

// Deprecations are containerd's deprecation warnings (its introspection
// service's), by id: containerd's CRI turns them into its
// ContainerdHasNoDeprecationWarnings condition.
func (r *Runtime) Deprecations(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := r.client.IntrospectionService().Server(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range resp.GetDeprecations() {
		out[d.GetID()] = d.GetMessage()
	}
	return out, nil
}

// Healthy reports whether containerd answers.
func (r *Runtime) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := r.client.IsServing(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("containerd is not serving")
	}
	return nil
}

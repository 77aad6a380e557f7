// Package server is the kubelet HTTPS API (logs, exec, port-forward, pods,
// healthz, stats, metrics, the node's logs) for the pods the node runs, authorized as the kubelet's is.
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/testpanic"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	utilexec "k8s.io/utils/exec"
)

// Config configures the kubelet HTTPS API and names what it serves.
type Config struct {
	Addr string
	// Cert is the serving certificate, asked on each handshake (tls.go).
	Cert Certificate
	// TLS is the kubelet's tlsMinVersion and tlsCipherSuites.
	TLS TLS
	// ReadOnlyAddr, if set, serves the kubelet's read-only port there:
	// health, the node's pods, stats and metrics over plain HTTP without
	// authentication (readOnlyPort).
	ReadOnlyAddr string
	ClientCAFile string
	AuthCache    AuthCache
	// Auth is the kubelet's authentication and authorization mode (the
	// zero value its defaults).
	Auth AuthMode
	// DebuggingDisabled is enableDebuggingHandlers: false: as the
	// kubelet's InstallDebuggingDisabledHandlers, what reads a container's
	// output or runs in it (exec, attach, portForward, containerLogs, run,
	// runningpods), the node's logs and profiles answer 405, and /configz
	// is not served; health, /pods, stats and metrics are.
	DebuggingDisabled  bool
	StreamIdleTimeout  time.Duration
	StreamCreationTime time.Duration
	NodeName           string

	// Client reviews tokens and access (TokenReview, SubjectAccessReview).
	Client kubernetes.Interface
	// Pods are the pods the node runs; APIPods the node's pods in the API.
	Pods    Pods
	APIPods corelisters.PodLister
	Runtime Runtime
	Events  Recorder
	// Node, Stats, Usage and Volumes are read for /stats/summary and
	// /metrics/resource; Metrics are more collectors for /metrics.
	Node    NodeStats
	Stats   StatsRuntime
	Usage   DiskUsage
	Volumes Volumes
	// CSI, if set, has the CSI drivers' usage of pods' CSI volumes.
	CSI CSIVolumes
	// Cgroups are read for /metrics/cadvisor, with Stats (the pods'
	// network) and Usage (containers' writable layers).
	Cgroups Cgroups
	// SystemContainers are the summary's system containers by name
	// ("kubelet", "misc", "pods") and their cgroups, read through Cgroups
	// (nodecontainers.Manager.SystemContainers).
	SystemContainers map[string]string
	// NoServer is enableServer: false: the kubelet API's listener is not
	// started (the read-only port still is, as the kubelet's).
	NoServer bool
	Metrics  []prometheus.Collector
	// ProbeMetrics are served on /metrics/probes.
	ProbeMetrics []prometheus.Collector
	// Profiling serves /debug/pprof/ (enableProfilingHandler).
	Profiling bool
	// ContentionProfiling samples every blocking event for
	// /debug/pprof/block (enableContentionProfiling), with Profiling only.
	ContentionProfiling bool
	// SetVerbosity, if set, serves /debug/flags/v (enableDebugFlagsHandler):
	// a PUT sets the log verbosity. Unset: the endpoint answers 405.
	SetVerbosity func(v uint32)
	// Configz is the node's effective KubeletConfiguration (v1beta1),
	// served on /configz as the kubelet's: {"kubeletconfig": ...}.
	Configz any
	// Health are the node's health checks, served on /healthz (ping only
	// when nil).
	Health Health
	// SystemLogs serves NodeLogDir (DefaultNodeLogDir when empty) on
	// /logs/ (enableSystemLogHandler); SystemLogQuery answers node log
	// queries there (enableSystemLogQuery with the NodeLogQuery gate).
	SystemLogs, SystemLogQuery bool
	NodeLogDir                 string
	// Mirror, if set, is the node's registry mirror, served on /v2/ to the
	// other nodes: it checks their client certificates itself (a node has
	// no nodes/proxy access to another), without the kubelet's
	// authorization.
	Mirror http.Handler
}

// Health are the node's named health checks (health.Checks).
type Health interface {
	Checkers() []healthz.HealthChecker
}

// CSIVolumes is the node's CSI plugin (provider/volumes/csi.Manager).
type CSIVolumes interface {
	VolumeStats(ctx context.Context, pod *v1.Pod, volName string) (csi.VolumeStats, bool, error)
}

// Pods finds the pods the node runs (provider.Provider).
type Pods interface {
	GetPod(ctx context.Context, namespace, name string) (*v1.Pod, error)
	// GetPodByUID finds one incarnation of a pod, whatever the newest one of
	// its name is.
	GetPodByUID(ctx context.Context, uid types.UID) (*v1.Pod, error)
	GetPods(ctx context.Context) ([]*v1.Pod, error)
}

// Runtime is what the API uses of the container runtime (runtime.Runtime).
type Runtime interface {
	LogDir(namespace, name, uid string) string
	ContainerStatus(ctx context.Context, id string) (runtime.ContainerStatus, error)
	Exec(ctx context.Context, id string, cmd []string, eio runtime.ExecIO) (int, error)
	Attach(ctx context.Context, id string, eio runtime.ExecIO) error
	DialPod(ctx context.Context, uid string, port int32) (net.Conn, error)
}

// Recorder records events about a pod's container (provider.Recorder).
type Recorder interface {
	Event(pod *v1.Pod, container, eventType, reason, msg string)
}

// server answers the kubelet API's pod routes.
type server struct {
	cfg Config
	cpu cpuRates
}

// Package server is the kubelet's HTTPS API for the pods hostlet runs.
// Serve runs the kubelet API (logs, exec, attach, pods, healthz), authenticated and
// authorized as the kubelet's is: client certificates from the client CA or
// bearer tokens (TokenReview), then a SubjectAccessReview per request.
func Serve(ctx context.Context, cfg Config) error {
	s := &server{cfg: cfg}
	auth, err := newKubeletAuth(ctx, cfg.Client, cfg.ClientCAFile, cfg.AuthCache, cfg.Auth)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	ro := s.readOnlyRoutes()
	ro.install(mux)
	if cfg.DebuggingDisabled {
		s.installDebuggingDisabled(mux)
	} else {
		s.installDebugging(mux)
	}

	caPEM, err := os.ReadFile(cfg.ClientCAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tlsCfg := &tls.Config{
		GetCertificate: getCertificate(cfg.Cert),
		ClientCAs:      pool,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		MinVersion:     cfg.TLS.minVersion(),
		CipherSuites:   cfg.TLS.CipherSuites,
	}
	if cfg.NoServer {
		log.Info("enableServer is false: the kubelet API is not served")
		if cfg.ReadOnlyAddr != "" {
			if err := ro.serve(ctx, cfg.ReadOnlyAddr, cfg.APIPods); err != nil {
				return fmt.Errorf("read-only port: %w", err)
			}
		}
		return nil
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	var routes http.Handler = mux
	if !cfg.DebuggingDisabled {
		// The pod incarnation forms of exec and attach: without the
		// debugging handlers they are 405 as the others.
		routes = withZeroTail(s.withStreamRoutes(mux))
	}
	handler := withKubeletAuth(auth, cfg.NodeName, routes)
	if cfg.Mirror != nil {
		handler = withMirror(cfg.Mirror, handler)
	}
	handler = withRecovery(handler)
	if cfg.ReadOnlyAddr != "" {
		if err := ro.serve(ctx, cfg.ReadOnlyAddr, cfg.APIPods); err != nil {
			return fmt.Errorf("read-only port: %w", err)
		}
	}
	srv := &http.Server{Handler: handler, TLSConfig: tlsCfg, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		defer crash.Recover(log.WithField("server", "kubelet API"), nil)
		if err := srv.ServeTLS(ln, "", ""); err != nil && err != http.ErrServerClosed {
			log.WithError(err).Error("kubelet API server stopped")
		}
	}()
	return nil
}

// installDebugging adds what the kubelet's enableDebuggingHandlers serves
// (its InstallAuthRequiredHandlers, with the node's logs and profiles):
// the pods' logs, exec, attach and port-forward (virtual-kubelet's routes,
// /pods among them), /logs/, /configz, /debug/pprof/.
func (s *server) installDebugging(mux *http.ServeMux) {
	cfg := s.cfg
	mux.Handle("/logs/", nodeLogsHandler(cfg.NodeLogDir, cfg.SystemLogs, cfg.SystemLogQuery))
	if cfg.Configz != nil {
		mux.Handle("GET /configz", configzHandler(cfg.Configz))
	}
	if cfg.Profiling {
		attachProfiling(mux, cfg.ContentionProfiling)
	}
	mux.Handle(debugFlagsPath, debugFlagsHandler(cfg.SetVerbosity))
	api.AttachPodRoutes(api.PodHandlerConfig{
		RunInContainer:    s.RunInContainer,
		AttachToContainer: s.AttachToContainer,
		GetContainerLogs:  s.GetContainerLogs,
		PortForward:       s.PortForward,
		GetPods:           cfg.Pods.GetPods,
		GetPodsFromKubernetes: func(context.Context) ([]*v1.Pod, error) {
			return cfg.APIPods.List(labels.Everything())
		},
		StreamIdleTimeout:     cfg.StreamIdleTimeout,
		StreamCreationTimeout: cfg.StreamCreationTime,
	}, mux, false)
}

// installDebuggingDisabled is the kubelet's API without its debugging
// handlers: /pods (its InstallAuthNotRequiredHandlers has it) and 405
// "Debug endpoints are disabled." on the debugging paths, as its
// InstallDebuggingDisabledHandlers; anything else (/configz) is not found.
func (s *server) installDebuggingDisabled(mux *http.ServeMux) {
	mux.Handle("GET /pods", api.HandleRunningPods(func(context.Context) ([]*v1.Pod, error) {
		return s.cfg.APIPods.List(labels.Everything())
	}))
	installDebugDisabled(mux)
}

// withMirror sends the OCI distribution API's paths to the mirror, the
// rest to the kubelet API.
func withMirror(mirror, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2" || strings.HasPrefix(r.URL.Path, "/v2/") {
			mirror.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// containerRef finds a container (regular, init or ephemeral) of a pod the
// node runs: the incarnation a uid-form URL named (see withStreamRoutes), or
// the newest of the name.
func (s *server) containerRef(ctx context.Context, namespace, podName, container string) (*v1.Pod, *v1.ContainerStatus, error) {
	var pod *v1.Pod
	var err error
	if uid, ok := ctx.Value(podUIDKey{}).(types.UID); ok {
		pod, err = s.cfg.Pods.GetPodByUID(ctx, uid)
	} else {
		pod, err = s.cfg.Pods.GetPod(ctx, namespace, podName)
	}
	if err != nil {
		return nil, nil, errdefs.NotFoundf("pod %s/%s not found", namespace, podName)
	}
	st := pod.Status
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == container {
				return pod, &list[i], nil
			}
		}
	}
	return nil, nil, errdefs.InvalidInputf("container %s is not valid for pod %s", container, podName)
}

func containerIDOf(st *v1.ContainerStatus) string {
	return strings.TrimPrefix(st.ContainerID, "containerd://")
}

// GetContainerLogs serves `kubectl logs`.
func (s *server) GetContainerLogs(ctx context.Context, namespace, podName, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	pod, st, err := s.containerRef(ctx, namespace, podName, container)
	if err != nil {
		return nil, err
	}
	attempt := int(st.RestartCount)
	if opts.Previous {
		if st.LastTerminationState.Terminated == nil {
			return nil, errdefs.InvalidInputf("previous terminated container %q in pod %q not found", container, podName)
		}
		if st.State.Running != nil || st.State.Terminated != nil {
			attempt--
		}
	} else if st.ContainerID == "" {
		reason := "ContainerCreating"
		if st.State.Waiting != nil {
			reason = st.State.Waiting.Reason
		}
		return nil, errdefs.InvalidInputf("container %q in pod %q is waiting to start: %s", container, podName, reason)
	}
	path := filepath.Join(s.cfg.Runtime.LogDir(namespace, podName, string(pod.UID)), container, strconv.Itoa(attempt)+".log")
	lo := runtime.LogOptions{Tail: -1, Timestamps: opts.Timestamps, LimitBytes: int64(opts.LimitBytes), Follow: opts.Follow && !opts.Previous}
	if opts.Tail > 0 || zeroTail(ctx) {
		lo.Tail = opts.Tail
	}
	switch {
	case !opts.SinceTime.IsZero():
		lo.Since = opts.SinceTime
	case opts.SinceSeconds > 0:
		lo.Since = time.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	id := containerIDOf(st)
	running := func() bool {
		cs, err := s.cfg.Runtime.ContainerStatus(context.WithoutCancel(ctx), id)
		return err == nil && cs.State == runtime.StateRunning
	}
	r, w := io.Pipe()
	go func() {
		defer crash.Recover(lifecycle.PodLogger(pod).WithField("container", container), func(msg string) {
			s.cfg.Events.Event(pod, container, v1.EventTypeWarning, "Failed", "Error: reading logs: panic: "+msg)
			w.CloseWithError(fmt.Errorf("panic: %s", msg))
		})
		testpanic.At(pod, "logs")
		w.CloseWithError(runtime.ReadLog(ctx, path, lo, w, running))
	}()
	return r, nil
}

// RunInContainer serves `kubectl exec`.
func (s *server) RunInContainer(ctx context.Context, namespace, podName, container string, cmd []string, attach api.AttachIO) error {
	id, eio, done, err := s.session(ctx, namespace, podName, container, attach)
	if err != nil {
		return err
	}
	defer done()
	code, err := s.cfg.Runtime.Exec(ctx, id, cmd, eio)
	if err != nil {
		return err
	}
	if code != 0 {
		// The streaming protocol turns this into the command's exit code.
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with non-zero exit code: %d", code), Code: code}
	}
	return nil
}

// PortForward serves `kubectl port-forward`: one stream to one port of the
// pod, connected from inside the pod's network namespace.
func (s *server) PortForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error {
	pod, err := s.cfg.Pods.GetPod(ctx, namespace, podName)
	if err != nil {
		return err
	}
	conn, err := s.cfg.Runtime.DialPod(ctx, string(pod.UID), port)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %s: %w", port, podName, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	l := lifecycle.PodLogger(pod).WithField("port", port)
	copyThen := func(dst io.Writer, src io.Reader) {
		defer func() { done <- struct{}{} }()
		defer crash.Recover(l, nil)
		_, _ = io.Copy(dst, src)
	}
	go copyThen(conn, stream)
	go copyThen(stream, conn)
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// withRecovery answers a request whose handler panicked with 500 and logs
// the stack with the pod the path names; net/http would only drop the
// connection. Streams (exec, attach, port-forward) run in goroutines of
// their own, guarded where hostlet starts them.
func withRecovery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := log.WithFields(log.Fields{"method": r.Method, "path": r.URL.Path})
		// /containerLogs/{ns}/{pod}/..., /exec/{ns}/{pod}/..., ...
		if parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/"); len(parts) >= 3 {
			l = l.WithFields(log.Fields{"namespace": parts[1], "pod": parts[2]})
		}
		defer crash.Recover(l, func(string) {
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		})
		next.ServeHTTP(w, r)
	})
}

package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/server/healthz"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// readOnly are the routes the kubelet serves without authentication on its
// read-only port (its InstallAuthNotRequiredHandlers), which the kubelet API
// serves too, authorized: health, stats and metrics. Made once: each
// metrics registry is the same on both.
type readOnly struct {
	checks                                []healthz.HealthChecker
	summary                               http.HandlerFunc
	resource, own, cadvisor, probeMetrics http.Handler
}

func (s *server) readOnlyRoutes() readOnly {
	checks := []healthz.HealthChecker{healthz.PingHealthz}
	if s.cfg.Health != nil {
		checks = s.cfg.Health.Checkers()
	}
	resource, own := s.metricsHandlers()
	return readOnly{checks: checks, summary: s.serveSummary, resource: resource, own: own,
		cadvisor: s.cadvisorHandler(), probeMetrics: s.probeMetricsHandler()}
}

func (ro readOnly) install(mux *http.ServeMux) {
	healthz.InstallHandler(mux, ro.checks...)
	mux.HandleFunc("GET /stats/summary", ro.summary)
	mux.Handle("GET /metrics/resource", ro.resource)
	mux.Handle("GET /metrics", ro.own)
	mux.Handle("GET /metrics/cadvisor", ro.cadvisor)
	mux.Handle("GET /metrics/probes", ro.probeMetrics)
}

// debugPaths are what the kubelet's read-only port answers 405 "Debug
// endpoints are disabled." (InstallDebuggingDisabledHandlers): nothing that
// reads a container's output or runs in it is served without
// authentication.
var debugPaths = []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods/", "/debug/pprof/", "/logs/"}

// installDebugDisabled answers the debugging paths as the kubelet's
// InstallDebuggingDisabledHandlers: 405 "Debug endpoints are disabled.".
func installDebugDisabled(mux *http.ServeMux) {
	disabled := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
	})
	for _, p := range debugPaths {
		mux.Handle(p, disabled)
	}
}

// serve listens on addr and serves the read-only port until ctx ends:
// plain HTTP, no authentication, as the kubelet's. /pods lists the node's
// pods from the API as the kubelet API's /pods does.
func (ro readOnly) serve(ctx context.Context, addr string, pods corelisters.PodLister) error {
	mux := http.NewServeMux()
	ro.install(mux)
	mux.Handle("GET /pods", api.HandleRunningPods(func(context.Context) ([]*v1.Pod, error) {
		return pods.List(labels.Everything())
	}))
	installDebugDisabled(mux)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: withRecovery(mux), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		defer crash.Recover(log.WithField("server", "read-only port"), nil)
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.WithError(err).Error("read-only port stopped")
		}
	}()
	log.WithField("address", addr).Warn("serving the kubelet's read-only port: pods, stats and metrics without authentication")
	return nil
}

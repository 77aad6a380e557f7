package health

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/server/healthz"
)

// Install serves the checks on mux at /healthz as the kubelet does:
// "ok", or 500 listing each check ([+]name ok, [-]name failed: reason
// withheld); ?verbose lists them when all pass too, /healthz/<name> is one
// check with its reason, ?exclude=<name> leaves one out.
func (c *Checks) Install(mux *http.ServeMux) {
	healthz.InstallHandler(mux, c.Checkers()...)
}

// Serve serves /healthz, unauthenticated, on addr (the kubelet's
// --healthz-bind-address and --healthz-port, 127.0.0.1:10248) until ctx
// ends. As the kubelet's, a port it cannot listen on is retried every 5 s,
// logged, and does not stop the node. serving is closed once it listens.
func (c *Checks) Serve(ctx context.Context, addr string) (serving <-chan struct{}) {
	mux := http.NewServeMux()
	c.Install(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ready := make(chan struct{})
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		defer crash.Recover(log.WithField("server", "healthz"), nil)
		for ctx.Err() == nil {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				log.WithError(err).WithField("address", addr).Error("Failed to start healthz server; retrying in 5s")
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
				continue
			}
			close(ready)
			if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
				log.WithError(err).Error("healthz server stopped")
			}
			return
		}
	}()
	return ready
}

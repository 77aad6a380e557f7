// Package probes runs container probes (exec, httpGet, tcpSocket, grpc) and
// lifecycle hooks as the kubelet does, and the periodic workers that turn
// probe results into liveness, readiness and startup decisions.
package probes

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Result of one probe run.
type Result int

const (
	Success Result = iota
	Failure
	// Warning is a success worth an event (a redirect the probe did not follow).
	Warning
)

// Target is the container a probe or hook runs against.
type Target struct {
	// PodIP is the default host of httpGet, tcpSocket and grpc handlers.
	PodIP     string
	Container *v1.Container
	// Exec runs a command in the container, bounded by timeout (zero: none).
	Exec func(ctx context.Context, cmd []string, timeout time.Duration) ([]byte, int, error)
}

// Prober runs probe and hook handlers and probe workers. It is safe for
// concurrent use; one serves the whole node.
type Prober struct {
	transport *http.Transport
	// clock times sleep hooks.
	clock clock.Clock
}

// dialer closes probe connections with SO_LINGER 1 so thousands of probes
// do not leave sockets in TIME_WAIT, as the kubelet's probe dialer does.
func dialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
		})
	}}
}

func NewProber() *Prober {
	return &Prober{clock: clock.RealClock{}, transport: &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives:  true,
		DisableCompression: true,
		Proxy:              nil,
		DialContext:        dialer().DialContext,
	}}
}

// Probe runs one probe handler.
func (pr *Prober) Probe(ctx context.Context, h *v1.ProbeHandler, t Target, timeout time.Duration) (Result, string) {
	switch {
	case h.Exec != nil:
		return execProbe(ctx, h.Exec, t, timeout)
	case h.HTTPGet != nil:
		return pr.httpGet(ctx, h.HTTPGet, t, timeout)
	case h.TCPSocket != nil:
		return tcpProbe(ctx, h.TCPSocket, t, timeout)
	case h.GRPC != nil:
		return grpcProbe(ctx, h.GRPC, t, timeout)
	}
	return Failure, "missing probe handler"
}

// Start runs a probe worker (see WorkerConfig) until ctx ends or the probe
// has no more to say (startup succeeded; liveness or startup failed: the
// container is about to be killed and its successor gets new workers).
func (pr *Prober) Start(ctx context.Context, cfg WorkerConfig) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	go supervise(ctx, cfg)
}

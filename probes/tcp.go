package probes

import (
	"context"
	"net"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
)

// tcpProbe succeeds when a connection opens.
func tcpProbe(ctx context.Context, s *v1.TCPSocketAction, t Target, timeout time.Duration) (Result, string) {
	port, err := resolvePort(s.Port, t.Container)
	if err != nil {
		return Failure, err.Error()
	}
	host := s.Host
	if host == "" {
		host = t.PodIP
	}
	return tcp(ctx, net.JoinHostPort(host, strconv.Itoa(port)), timeout)
}

func tcp(ctx context.Context, addr string, timeout time.Duration) (Result, string) {
	d := dialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Failure, err.Error()
	}
	_ = conn.Close()
	return Success, ""
}

package probes

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func tcpAction(t *testing.T, addr string) (Target, *v1.ProbeHandler) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	return Target{PodIP: host, Container: &v1.Container{Name: "c"}},
		&v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.Parse(port)}}
}

// A listening port passes; a closed one (connection refused) fails.
func TestTCPProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	target, h := tcpAction(t, addr)
	if r, out := NewProber().Probe(context.Background(), h, target, time.Second); r != Success {
		t.Errorf("listening: %v %q", r, out)
	}
	l.Close()
	if r, out := NewProber().Probe(context.Background(), h, target, time.Second); r != Failure || !strings.Contains(out, "connection refused") {
		t.Errorf("closed: %v %q", r, out)
	}
}

// An explicit host overrides the pod IP.
func TestTCPProbeHost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	target, h := tcpAction(t, l.Addr().String())
	target.PodIP = "192.0.2.1" // never reached
	h.TCPSocket.Host = "127.0.0.1"
	if r, out := NewProber().Probe(context.Background(), h, target, time.Second); r != Success {
		t.Errorf("%v %q", r, out)
	}
}

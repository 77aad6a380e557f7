package probes

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
)

// grpcServer serves gRPC on a local port, with the health service when
// hs is not nil; it returns the probe target and port.
func grpcServer(t *testing.T, hs *health.Server) (Target, int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if hs != nil {
		healthpb.RegisterHealthServer(srv, hs)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	port := l.Addr().(*net.TCPAddr).Port
	return Target{PodIP: "127.0.0.1", Container: &v1.Container{Name: "c"}}, int32(port)
}

func grpcProbeOf(target Target, port int32, service *string) (Result, string) {
	return NewProber().Probe(context.Background(), &v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: port, Service: service}}, target, time.Second)
}

// SERVING passes, NOT_SERVING fails, per service name; a server without
// the health service and a closed port fail with the kubelet's messages.
func TestGRPCProbe(t *testing.T) {
	hs := health.NewServer()
	target, port := grpcServer(t, hs)
	if r, out := grpcProbeOf(target, port, nil); r != Success || out != "service healthy" {
		t.Errorf("serving: %v %q", r, out)
	}
	svc := "db"
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	if r, out := grpcProbeOf(target, port, &svc); r != Failure || out != `service unhealthy (responded with "NOT_SERVING")` {
		t.Errorf("not serving: %v %q", r, out)
	}
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	if r, _ := grpcProbeOf(target, port, &svc); r != Success {
		t.Errorf("serving again: %v", r)
	}

	bare, bport := grpcServer(t, nil)
	if r, out := grpcProbeOf(bare, bport, nil); r != Failure || !strings.Contains(out, "does not implement the grpc health protocol") {
		t.Errorf("no health service: %v %q", r, out)
	}

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := int32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	if r, out := grpcProbeOf(target, closed, nil); r != Failure || !strings.Contains(out, "timeout: failed to connect service") {
		t.Errorf("closed port: %v %q", r, out)
	}
}

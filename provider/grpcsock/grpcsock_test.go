package grpcsock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// health answers Check, and panics for the service "panic".
type health struct {
	healthpb.UnimplementedHealthServer
}

func (health) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if r.Service == "panic" {
		panic("boom")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// A stale file at the socket path is replaced, a panicking handler fails
// its call with Internal and the server goes on, and the server stops with
// its context.
func TestServe(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "sub", "kubelet.sock")
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Serve(ctx, socket, "test", func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health{}) }); err != nil {
		t.Fatal(err)
	}
	conn, err := Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "panic"}); status.Code(err) != codes.Internal {
		t.Errorf("panicking handler: %v, want Internal", err)
	}
	r, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after the panic: %v %v", r, err)
	}
	cancel()
	// The server stops shortly after: calls fail from then on.
	for {
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package main

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestGRPCHealthFollowsSwitch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := newHealth(true, time.Now(), 0)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, newHealthService(h, []string{"svc"}))
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	check := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		if resp.Status != want {
			t.Fatalf("Check(%q) = %v, want %v", service, resp.Status, want)
		}
	}
	check("", healthpb.HealthCheckResponse_SERVING)
	check("svc", healthpb.HealthCheckResponse_SERVING)
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(other) err = %v, want NotFound", err)
	}

	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	recv := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != want {
			t.Fatalf("Watch got %v, want %v", resp.Status, want)
		}
	}
	recv(healthpb.HealthCheckResponse_SERVING)
	h.set(false)
	recv(healthpb.HealthCheckResponse_NOT_SERVING)
	check("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.set(true)
	recv(healthpb.HealthCheckResponse_SERVING)
}

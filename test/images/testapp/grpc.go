package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService implements grpc.health.v1 on top of the shared switch, so
// gRPC probes see exactly what /healthz reports.
type healthService struct {
	healthpb.UnimplementedHealthServer
	h        *health
	services []string // "" plus --grpc-service names
}

func serveGRPC(addr string, h *health, extra []string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, newHealthService(h, extra))
	go func() {
		if err := srv.Serve(ln); err != nil {
			fmt.Fprintln(os.Stderr, "testapp: grpc:", err)
			exit(1)
		}
	}()
	return nil
}

func newHealthService(h *health, extra []string) *healthService {
	return &healthService{h: h, services: append([]string{""}, extra...)}
}

func servingStatus(ok bool) healthpb.HealthCheckResponse_ServingStatus {
	if ok {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

func (s *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	logf("grpc: Check %q", req.GetService())
	if !slices.Contains(s.services, req.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: servingStatus(s.h.healthy())}, nil
}

func (s *healthService) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	st := &healthpb.HealthCheckResponse{Status: servingStatus(s.h.healthy())}
	resp := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, name := range s.services {
		resp.Statuses[name] = st
	}
	return resp, nil
}

func (s *healthService) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	logf("grpc: Watch %q", req.GetService())
	if !slices.Contains(s.services, req.GetService()) {
		// The protocol answers unknown services with SERVICE_UNKNOWN on Watch.
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return status.FromContextError(stream.Context().Err()).Err()
	}
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		ok, changed := s.h.watch()
		if st := servingStatus(ok); st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

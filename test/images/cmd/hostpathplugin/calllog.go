package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// callLog is where logCalls writes: the container's stdout, which
// e2e.test reads back through the pod's log.
var callLog io.Writer = os.Stdout

// grpcCall is the line upstream's hostpathplugin logs for each call at
// -v=5, "gRPCCall: " and this as JSON: e2e.test's non-embedded CSI mock
// driver (drivers/csi.go, GetCalls) parses the container's log for them,
// by Method (the full gRPC name), Request's volume_context and secrets,
// and FullError's code.
type grpcCall struct {
	Method    string
	Request   any
	Response  any
	Error     string // "" when the call succeeded
	FullError *spb.Status
}

// logCalls is the gRPC interceptor logging each call as upstream does.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	c := grpcCall{Method: info.FullMethod, Request: req, Response: resp}
	if err != nil {
		c.Error = err.Error()
		c.FullError = status.Convert(err).Proto()
	}
	b, merr := json.Marshal(c)
	if merr != nil {
		b = []byte(fmt.Sprintf(`{"Method":%q,"Error":%q}`, info.FullMethod, merr.Error()))
	}
	fmt.Fprintf(callLog, "gRPCCall: %s\n", b)
	return resp, err
}

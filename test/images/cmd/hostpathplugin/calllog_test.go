package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLogCallsAsUpstream: the line parses as e2e.test's MockCSICall
// does (drivers/csi.go): the method, the request's volume_context and
// secrets, the error's code.
func TestLogCallsAsUpstream(t *testing.T) {
	var buf bytes.Buffer
	callLog = &buf
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodePublishVolume"}
	req := &csipb.NodePublishVolumeRequest{VolumeId: "4", VolumeContext: map[string]string{"csi.storage.k8s.io/pod.name": "p"},
		Secrets: map[string]string{"k": "v"}}
	_, err := logCalls(context.Background(), req, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "fake")
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the handler's error not passed on: %v", err)
	}
	line, ok := strings.CutPrefix(strings.TrimSuffix(buf.String(), "\n"), "gRPCCall: ")
	if !ok || strings.Contains(line, "\n") {
		t.Fatalf("log = %q, want one gRPCCall line", buf.String())
	}
	var call struct {
		Method  string
		Request struct {
			VolumeContext map[string]string `json:"volume_context"`
			Secrets       map[string]string `json:"secrets"`
		}
		FullError struct {
			Code    codes.Code `json:"code"`
			Message string     `json:"message"`
		}
		Error string
	}
	if err := json.Unmarshal([]byte(line), &call); err != nil {
		t.Fatal(err)
	}
	if call.Method != info.FullMethod || call.Request.VolumeContext["csi.storage.k8s.io/pod.name"] != "p" ||
		call.Request.Secrets["k"] != "v" || call.FullError.Code != codes.InvalidArgument || call.FullError.Message != "fake" || call.Error == "" {
		t.Errorf("parsed %+v", call)
	}
}

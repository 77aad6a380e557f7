package dra

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/hostlet/hostlet/provider/grpcsock"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// What was prepared survives a restart: a new manager over the same
// checkpoint gives the pod's containers the same CDI devices and knows the
// claim to unprepare, with no driver registered yet; once unprepared, a
// further restart knows nothing of it.
func TestCheckpointSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointName)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gpu-claim", UID: "c1"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "big", Driver: "gpu.example.com", Pool: "node", Device: "gpu-0"}},
		}}}}
	m := New(Config{Checkpoint: path})
	m.mu.Lock()
	m.record("p", map[string]prepared{"gpu": {claim: claim, devices: []*drapb.Device{
		{RequestNames: []string{"big"}, PoolName: "node", DeviceName: "gpu-0", CdiDeviceIds: []string{"gpu.example.com/gpu=0"}},
	}}})
	m.mu.Unlock()

	restarted := New(Config{Checkpoint: path})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p"}, Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu"}}}}
	c := &v1.Container{Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}
	if got := restarted.ContainerCDI(pod, c); !slices.Equal(got, []string{"gpu.example.com/gpu=0"}) {
		t.Fatalf("after a restart the container gets %v", got)
	}
	// Already prepared: no driver (none is registered) is asked again.
	if err := restarted.Prepare(t.Context(), pod); err != nil {
		t.Fatalf("Prepare of a checkpointed pod: %v", err)
	}
	got := restarted.pods["p"]["gpu"].claim
	if got.UID != "c1" || got.Status.Allocation.Devices.Results[0].Driver != "gpu.example.com" {
		t.Fatalf("claim read back as %+v", got)
	}

	// The driver is not back: the claim stays, pending, across a restart.
	restarted.Unprepare(t.Context(), "p")
	again := New(Config{Checkpoint: path})
	if !again.gone["p"] || len(again.pods["p"]) != 1 {
		t.Fatalf("a claim not unprepared was forgotten: pods %v, pending %v", again.pods, again.gone)
	}
	// The driver registers: the pending claim is unprepared, and forgotten.
	drv := &fakeDriver{}
	socket := filepath.Join(t.TempDir(), "dra.sock")
	if err := grpcsock.Serve(t.Context(), socket, "test driver", func(s *grpc.Server) { drapb.RegisterDRAPluginServer(s, drv) }); err != nil {
		t.Fatal(err)
	}
	again.mu.Lock()
	again.drivers["gpu.example.com"] = driver{endpoint: socket}
	again.mu.Unlock()
	again.retryUnprepare(t.Context())
	if got := drv.unprepared(); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("driver unprepared %v, want the claim c1", got)
	}
	if last := New(Config{Checkpoint: path}); len(last.pods) != 0 || len(last.gone) != 0 {
		t.Fatalf("after unprepare the checkpoint still holds %v, pending %v", last.pods, last.gone)
	}
}

// fakeDriver is a DRA driver's gRPC service that records what it was asked
// to unprepare.
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	mu   sync.Mutex
	uids []string
}

func (f *fakeDriver) NodeUnprepareResources(_ context.Context, r *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range r.Claims {
		f.uids = append(f.uids, c.Uid)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (f *fakeDriver) unprepared() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.uids)
}

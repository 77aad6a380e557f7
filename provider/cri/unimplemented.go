package cri

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What the view does not do, each with why: a caller (crictl, an agent)
// sees codes.Unimplemented and a reason rather than a bare "method not
// implemented".
const (
	// hostlet's pods come from the API server (and its static pod
	// manifests), each run by its own worker: a sandbox or container made
	// from outside would be one no worker knows, and a sandbox stopped or
	// removed behind its worker's back a pod it still runs. (A container
	// stopped or removed is one that died: StopContainer, RemoveContainer.)
	notOurs = "hostlet runs only the pods the API server binds to it (and its static pods): sandboxes are not made, stopped or removed, nor containers made or started, through CRI"
	notYet  = "not served by hostlet's CRI view yet"
)

func unimplemented(rpc, why string) error {
	return status.Errorf(codes.Unimplemented, "%s: %s", rpc, why)
}

func (s *server) RunPodSandbox(context.Context, *criapi.RunPodSandboxRequest) (*criapi.RunPodSandboxResponse, error) {
	return nil, unimplemented("RunPodSandbox", notOurs)
}

func (s *server) StopPodSandbox(context.Context, *criapi.StopPodSandboxRequest) (*criapi.StopPodSandboxResponse, error) {
	return nil, unimplemented("StopPodSandbox", notOurs)
}

func (s *server) RemovePodSandbox(context.Context, *criapi.RemovePodSandboxRequest) (*criapi.RemovePodSandboxResponse, error) {
	return nil, unimplemented("RemovePodSandbox", notOurs)
}

func (s *server) CreateContainer(context.Context, *criapi.CreateContainerRequest) (*criapi.CreateContainerResponse, error) {
	return nil, unimplemented("CreateContainer", notOurs)
}

func (s *server) StartContainer(context.Context, *criapi.StartContainerRequest) (*criapi.StartContainerResponse, error) {
	return nil, unimplemented("StartContainer", notOurs)
}

func (s *server) UpdateContainerResources(context.Context, *criapi.UpdateContainerResourcesRequest) (*criapi.UpdateContainerResourcesResponse, error) {
	return nil, unimplemented("UpdateContainerResources", "a container's resources are its pod's (in-place resize through the API server)")
}

func (s *server) UpdatePodSandboxResources(context.Context, *criapi.UpdatePodSandboxResourcesRequest) (*criapi.UpdatePodSandboxResourcesResponse, error) {
	return nil, unimplemented("UpdatePodSandboxResources", "a pod's resources are changed through the API server")
}

func (s *server) UpdateRuntimeConfig(context.Context, *criapi.UpdateRuntimeConfigRequest) (*criapi.UpdateRuntimeConfigResponse, error) {
	return nil, unimplemented("UpdateRuntimeConfig", "hostlet sets the pod CIDR itself, from its Node")
}

func (s *server) ListMetricDescriptors(context.Context, *criapi.ListMetricDescriptorsRequest) (*criapi.ListMetricDescriptorsResponse, error) {
	return nil, unimplemented("ListMetricDescriptors", notYet+" (the kubelet API's /metrics/cadvisor has the series)")
}

func (s *server) ListPodSandboxMetrics(context.Context, *criapi.ListPodSandboxMetricsRequest) (*criapi.ListPodSandboxMetricsResponse, error) {
	return nil, unimplemented("ListPodSandboxMetrics", notYet+" (the kubelet API's /metrics/cadvisor has the series)")
}

func (s *server) CheckpointContainer(context.Context, *criapi.CheckpointContainerRequest) (*criapi.CheckpointContainerResponse, error) {
	return nil, unimplemented("CheckpointContainer", "hostlet does not checkpoint containers")
}

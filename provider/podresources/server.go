// Package podresources serves the kubelet's pod resources API
// (k8s.io/kubelet/pkg/apis/podresources/v1) on
// <root-dir>/pod-resources/kubelet.sock: which devices each container
// holds and which the node has, for monitoring agents such as GPU
// exporters. CPU and memory assignments stay empty: hostlet has no CPU or
// memory manager.
package podresources

import (
	"context"
	"fmt"
	"sort"

	"github.com/hostlet/hostlet/provider/grpcsock"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Devices is what the API reads of the device manager.
type Devices interface {
	Assigned(podUID types.UID, container string) map[string][]string
	Allocatable() map[string][]string
}

// Config is the socket and the sources.
type Config struct {
	Socket string
	// ActivePods lists the node's pods that are not finished.
	ActivePods func() []*v1.Pod
	Devices    Devices
}

type server struct {
	api.UnimplementedPodResourcesListerServer
	cfg Config
}

// Serve listens on the socket (a stale one from before is replaced) and
// serves until ctx ends.
func Serve(ctx context.Context, cfg Config) error {
	return grpcsock.Serve(ctx, cfg.Socket, "pod resources", func(srv *grpc.Server) {
		api.RegisterPodResourcesListerServer(srv, &server{cfg: cfg})
	})
}

func (s *server) List(_ context.Context, _ *api.ListPodResourcesRequest) (*api.ListPodResourcesResponse, error) {
	pods := s.cfg.ActivePods()
	out := &api.ListPodResourcesResponse{PodResources: make([]*api.PodResources, 0, len(pods))}
	for _, p := range pods {
		out.PodResources = append(out.PodResources, s.podResources(p))
	}
	return out, nil
}

func (s *server) Get(_ context.Context, req *api.GetPodResourcesRequest) (*api.GetPodResourcesResponse, error) {
	for _, p := range s.cfg.ActivePods() {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &api.GetPodResourcesResponse{PodResources: s.podResources(p)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

func (s *server) GetAllocatableResources(_ context.Context, _ *api.AllocatableResourcesRequest) (*api.AllocatableResourcesResponse, error) {
	return &api.AllocatableResourcesResponse{Devices: containerDevices(s.cfg.Devices.Allocatable())}, nil
}

// podResources lists the containers that run for the pod's life, sidecars
// first, as the kubelet does.
func (s *server) podResources(p *v1.Pod) *api.PodResources {
	out := &api.PodResources{Name: p.Name, Namespace: p.Namespace}
	add := func(c *v1.Container) {
		out.Containers = append(out.Containers, &api.ContainerResources{
			Name: c.Name, Devices: containerDevices(s.cfg.Devices.Assigned(p.UID, c.Name)),
		})
	}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i])
	}
	return out
}

func containerDevices(byResource map[string][]string) []*api.ContainerDevices {
	names := make([]string, 0, len(byResource))
	for n := range byResource {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*api.ContainerDevices
	for _, n := range names {
		out = append(out, &api.ContainerDevices{ResourceName: n, DeviceIds: byResource[n]})
	}
	return out
}

package cri

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cpuSamples keeps each container's previous CPU sample: CRI's
// usageNanoCores is a rate, and containerd's CRI derives it from the
// sample before, as this does.
type cpuSamples struct {
	mu   sync.Mutex
	last map[string]runtime.ContainerStats
}

// nanoCores is the CPU rate since the container's previous sample, nil on
// its first or when the clock or counter went back (a restarted task).
func (c *cpuSamples) nanoCores(id string, now runtime.ContainerStats) *criapi.UInt64Value {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]runtime.ContainerStats{}
	}
	prev, ok := c.last[id]
	c.last[id] = now
	if !ok || !now.Time.After(prev.Time) || now.CPUUsageNanos < prev.CPUUsageNanos {
		return nil
	}
	dt := now.Time.Sub(prev.Time)
	return &criapi.UInt64Value{Value: uint64(float64(now.CPUUsageNanos-prev.CPUUsageNanos) / dt.Seconds())}
}

// forget drops the samples of containers no longer measured, so the map
// does not grow with every container the node ever ran.
func (c *cpuSamples) forget(live map[string]runtime.ContainerStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.last {
		if _, ok := live[id]; !ok {
			delete(c.last, id)
		}
	}
}

func (s *server) ContainerStats(ctx context.Context, r *criapi.ContainerStatsRequest) (*criapi.ContainerStatsResponse, error) {
	out, err := s.containerStats(ctx, &criapi.ContainerFilter{Id: r.GetContainerId()})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, status.Errorf(codes.NotFound, "container %q: not found or not running", r.GetContainerId())
	}
	return &criapi.ContainerStatsResponse{Stats: out[0]}, nil
}

func (s *server) ListContainerStats(ctx context.Context, r *criapi.ListContainerStatsRequest) (*criapi.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	out, err := s.containerStats(ctx, &criapi.ContainerFilter{Id: f.GetId(), PodSandboxId: f.GetPodSandboxId(), LabelSelector: f.GetLabelSelector()})
	if err != nil {
		return nil, err
	}
	return &criapi.ListContainerStatsResponse{Stats: out}, nil
}

// containerStats are the stats of the containers the filter selects that
// have a live task: one Metrics call to containerd for all, the numbers
// /stats/summary reports (runtime.ContainerStats).
func (s *server) containerStats(ctx context.Context, f *criapi.ContainerFilter) ([]*criapi.ContainerStats, error) {
	list, err := s.ListContainers(ctx, &criapi.ListContainersRequest{Filter: f})
	if err != nil {
		return nil, err
	}
	metrics, err := s.cfg.Runtime.ContainerStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("container metrics: %w", err)
	}
	out := []*criapi.ContainerStats{}
	for _, c := range list.Containers {
		m, ok := metrics[c.Id]
		if !ok {
			continue
		}
		out = append(out, criContainerStats(c, m, s.samples.nanoCores(c.Id, m)))
	}
	if f.GetId() == "" && f.GetPodSandboxId() == "" && len(f.GetLabelSelector()) == 0 {
		s.samples.forget(metrics)
	}
	return out, nil
}

func criContainerStats(c *criapi.Container, m runtime.ContainerStats, nanoCores *criapi.UInt64Value) *criapi.ContainerStats {
	ts := m.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	return &criapi.ContainerStats{
		Attributes: &criapi.ContainerAttributes{Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations},
		Cpu: &criapi.CpuUsage{
			Timestamp:            ts.UnixNano(),
			UsageCoreNanoSeconds: &criapi.UInt64Value{Value: m.CPUUsageNanos},
			UsageNanoCores:       nanoCores,
		},
		Memory: &criapi.MemoryUsage{
			Timestamp:       ts.UnixNano(),
			WorkingSetBytes: &criapi.UInt64Value{Value: m.WorkingSet},
			UsageBytes:      &criapi.UInt64Value{Value: m.MemoryUsage},
			RssBytes:        &criapi.UInt64Value{Value: m.RSS},
			PageFaults:      &criapi.UInt64Value{Value: m.PageFaults},
			MajorPageFaults: &criapi.UInt64Value{Value: m.MajorPageFaults},
		},
	}
}

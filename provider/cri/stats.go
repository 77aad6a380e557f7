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

// nanoCores is the CPU rate since the container's previous sample, 0 on
// its first or when the clock or counter went back (a restarted task), as
// containerd's getUsageNanoCores.
func (c *cpuSamples) nanoCores(id string, now runtime.ContainerStats) *criapi.UInt64Value {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]runtime.ContainerStats{}
	}
	prev, ok := c.last[id]
	c.last[id] = now
	if !ok || !now.Time.After(prev.Time) || now.CPUUsageNanos < prev.CPUUsageNanos {
		return &criapi.UInt64Value{}
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
	if len(out) == 0 || out[0].Cpu == nil {
		// No task, no metrics: containerd's CRI fails it too.
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

// containerStats are the stats of the containers the filter selects, as
// containerd's CRI lists them: every container its writable layer, those
// with a live task their CPU and memory too (one Metrics call to containerd
// for all, the numbers /stats/summary reports: runtime.ContainerStats).
func (s *server) containerStats(ctx context.Context, f *criapi.ContainerFilter) ([]*criapi.ContainerStats, error) {
	list, err := s.ListContainers(ctx, &criapi.ListContainersRequest{Filter: f})
	if err != nil {
		return nil, err
	}
	metrics, err := s.cfg.Runtime.ContainerStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("container metrics: %w", err)
	}
	fsDir, err := s.cfg.Images.ImageFsDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("image filesystem: %w", err)
	}
	out := []*criapi.ContainerStats{}
	for _, c := range list.Containers {
		st := &criapi.ContainerStats{
			Attributes:    &criapi.ContainerAttributes{Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations},
			WritableLayer: s.layers.usage(ctx, s.cfg.Runtime, c.Id, fsDir),
		}
		if m, ok := metrics[c.Id]; ok {
			addTaskStats(st, m, s.samples.nanoCores(c.Id, m))
		}
		out = append(out, st)
	}
	if f.GetId() == "" && f.GetPodSandboxId() == "" && len(f.GetLabelSelector()) == 0 {
		s.samples.forget(metrics)
		s.layers.forget(list.Containers)
	}
	return out, nil
}

// addTaskStats are a live task's CPU and memory, as containerd's
// linuxContainerMetrics: the memory available is the limit less the
// working set, 0 without a limit.
func addTaskStats(st *criapi.ContainerStats, m runtime.ContainerStats, nanoCores *criapi.UInt64Value) {
	ts := m.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	avail := uint64(0)
	if m.MemoryLimit != 0 && m.MemoryLimit <= unlimitedMemory && m.MemoryLimit > m.WorkingSet {
		avail = m.MemoryLimit - m.WorkingSet
	}
	st.Cpu = &criapi.CpuUsage{
		Timestamp:            ts.UnixNano(),
		UsageCoreNanoSeconds: &criapi.UInt64Value{Value: m.CPUUsageNanos},
		UsageNanoCores:       nanoCores,
	}
	st.Memory = &criapi.MemoryUsage{
		Timestamp:       ts.UnixNano(),
		WorkingSetBytes: &criapi.UInt64Value{Value: m.WorkingSet},
		AvailableBytes:  &criapi.UInt64Value{Value: avail},
		UsageBytes:      &criapi.UInt64Value{Value: m.MemoryUsage},
		RssBytes:        &criapi.UInt64Value{Value: m.RSS},
		PageFaults:      &criapi.UInt64Value{Value: m.PageFaults},
		MajorPageFaults: &criapi.UInt64Value{Value: m.MajorPageFaults},
	}
}

// layerPeriod is how long a writable layer's measure is kept: containerd's
// CRI measures its snapshots every stats_collect_period (10s by default).
const layerPeriod = 10 * time.Second

// layerUsages keeps each container's writable layer measure (a walk of
// its upper directory) for layerPeriod, as containerd's snapshot syncer
// keeps its own.
type layerUsages struct {
	mu   sync.Mutex
	last map[string]*criapi.FilesystemUsage
}

// usage is the container's writable layer on the image filesystem at
// fsDir: its use as last measured, measured again once older than
// layerPeriod; 0 with no timestamp when it cannot be (containerd's answer
// for a snapshot it has no measure of).
func (l *layerUsages) usage(ctx context.Context, rt Runtime, id, fsDir string) *criapi.FilesystemUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]*criapi.FilesystemUsage{}
	}
	u := l.last[id]
	if u == nil || time.Since(time.Unix(0, u.Timestamp)) >= layerPeriod {
		u = &criapi.FilesystemUsage{UsedBytes: &criapi.UInt64Value{}, InodesUsed: &criapi.UInt64Value{}}
		if du, err := rt.RootfsUsage(ctx, id); err == nil {
			u.Timestamp, u.UsedBytes.Value, u.InodesUsed.Value = time.Now().UnixNano(), du.Bytes, du.Inodes
			l.last[id] = u
		}
	}
	return &criapi.FilesystemUsage{Timestamp: u.Timestamp, FsId: &criapi.FilesystemIdentifier{Mountpoint: fsDir},
		UsedBytes: &criapi.UInt64Value{Value: u.UsedBytes.Value}, InodesUsed: &criapi.UInt64Value{Value: u.InodesUsed.Value}}
}

// forget drops the measures of containers no longer listed.
func (l *layerUsages) forget(live []*criapi.Container) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make(map[string]bool, len(live))
	for _, c := range live {
		ids[c.Id] = true
	}
	for id := range l.last {
		if !ids[id] {
			delete(l.last, id)
		}
	}
}

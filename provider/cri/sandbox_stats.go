package cri

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultIfName is the pod interface containerd's CRI reports (eth0).
const defaultIfName = "eth0"

// unlimitedMemory is containerd's bound above which a cgroup's memory
// limit counts as none (isMemoryUnlimited).
const unlimitedMemory = uint64(1 << 62)

func (s *server) PodSandboxStats(ctx context.Context, r *criapi.PodSandboxStatsRequest) (*criapi.PodSandboxStatsResponse, error) {
	p, err := s.sandbox(ctx, r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if p.state() != criapi.PodSandboxState_SANDBOX_READY {
		// containerd's CRI: ErrUnavailable, no stats of a stopped sandbox.
		return nil, status.Errorf(codes.Unavailable, "failed to get pod sandbox stats since sandbox container %q is not in ready state", sandboxID(p.uid))
	}
	st, err := s.podSandboxStats(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("failed to decode pod sandbox metrics %s: %w", sandboxID(p.uid), err)
	}
	return &criapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats are the ready sandboxes' stats, as containerd's CRI
// lists them (a stopped sandbox has none).
func (s *server) ListPodSandboxStats(ctx context.Context, r *criapi.ListPodSandboxStatsRequest) (*criapi.ListPodSandboxStatsResponse, error) {
	pods, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	f := r.GetFilter()
	want := ""
	if f.GetId() != "" {
		p, err := findSandbox(pods, f.GetId())
		if err != nil {
			return &criapi.ListPodSandboxStatsResponse{}, nil
		}
		want = p.uid
	}
	out := &criapi.ListPodSandboxStatsResponse{}
	for _, sb := range sortedSandboxes(pods) {
		p := pods[sb.Metadata.Uid]
		if p == nil || (want != "" && p.uid != want) || p.state() != criapi.PodSandboxState_SANDBOX_READY || !matchLabels(sb.Labels, f.GetLabelSelector()) {
			continue
		}
		st, err := s.podSandboxStats(ctx, p)
		if err != nil {
			// Gone meanwhile, as containerd skips a transient error.
			continue
		}
		out.Stats = append(out.Stats, st)
	}
	return out, nil
}

// podSandboxStats are a ready sandbox's figures as containerd's CRI fills
// them: the pod cgroup's CPU (no rate) and memory (the hierarchy's page
// faults), eth0 of its network namespace (no timestamp), its containers'
// stats and their process count.
func (s *server) podSandboxStats(ctx context.Context, p *podSandbox) (*criapi.PodSandboxStats, error) {
	id := sandboxID(p.uid)
	out := &criapi.PodSandboxStats{
		Attributes: &criapi.PodSandboxAttributes{Id: id, Metadata: p.metadata(), Labels: p.labels(), Annotations: p.annotations()},
		Linux:      &criapi.LinuxPodSandboxStats{},
	}
	containers, err := s.containerStats(ctx, &criapi.ContainerFilter{PodSandboxId: id})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(containers))
	for _, c := range containers {
		ids = append(ids, c.Attributes.Id)
	}
	podCgroup, cgroups, err := s.cfg.Runtime.PodCgroupNames(p.uid, ids)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if podCgroup != "" {
		cg, err := s.cfg.Runtime.CgroupStats(podCgroup)
		if err != nil {
			return nil, fmt.Errorf("cgroup of sandbox %s: %w", id, err)
		}
		if !cg.Time.IsZero() {
			now = cg.Time
		}
		// No rate: containerd's CRI derives usageNanoCores for containers
		// only (the kubelet's CRI stats provider computes the pod's).
		out.Linux.Cpu = &criapi.CpuUsage{Timestamp: now.UnixNano(), UsageCoreNanoSeconds: &criapi.UInt64Value{Value: cg.CPU.Total}}
		avail := uint64(0)
		if cg.Spec.HasMemory && cg.Spec.MemoryLimit <= unlimitedMemory && cg.Spec.MemoryLimit > cg.Memory.WorkingSet {
			avail = cg.Spec.MemoryLimit - cg.Memory.WorkingSet
		}
		out.Linux.Memory = &criapi.MemoryUsage{
			Timestamp:       now.UnixNano(),
			WorkingSetBytes: &criapi.UInt64Value{Value: cg.Memory.WorkingSet},
			AvailableBytes:  &criapi.UInt64Value{Value: avail},
			UsageBytes:      &criapi.UInt64Value{Value: cg.Memory.Usage},
			RssBytes:        &criapi.UInt64Value{Value: cg.Memory.RSS},
			PageFaults:      &criapi.UInt64Value{Value: cg.Memory.TotalPageFaults},
			MajorPageFaults: &criapi.UInt64Value{Value: cg.Memory.TotalMajorPageFaults},
		}
	}
	// A pod on the host network has no namespace of its own, and no
	// network stats, as containerd's sandbox without a netns path.
	if ifaces, err := s.cfg.Runtime.PodNetworkStats(p.uid); err != nil || ifaces != nil {
		eth := &criapi.NetworkInterfaceUsage{Name: defaultIfName, RxBytes: &criapi.UInt64Value{}, RxErrors: &criapi.UInt64Value{},
			TxBytes: &criapi.UInt64Value{}, TxErrors: &criapi.UInt64Value{}}
		for _, i := range ifaces {
			if i.Name == defaultIfName {
				eth.RxBytes.Value, eth.RxErrors.Value, eth.TxBytes.Value, eth.TxErrors.Value = i.RxBytes, i.RxErrors, i.TxBytes, i.TxErrors
			}
		}
		// No timestamp, as containerd's.
		out.Linux.Network = &criapi.NetworkUsage{DefaultInterface: eth}
	}
	// The process count sums the containers' pids, as containerd's.
	var pids uint64
	for _, c := range containers {
		if name := cgroups[c.Attributes.Id]; name != "" {
			if cg, err := s.cfg.Runtime.CgroupStats(name); err == nil {
				pids += cg.Threads
			}
		}
	}
	out.Linux.Containers = containers
	out.Linux.Process = &criapi.ProcessUsage{Timestamp: now.UnixNano(), ProcessCount: &criapi.UInt64Value{Value: pids}}
	return out, nil
}

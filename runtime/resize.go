package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/typeurl/v2"
	"github.com/opencontainers/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// UpdateContainerResources changes a running container's cgroup settings
// live, as CRI's UpdateContainerResources does: the stored spec first (what
// ContainerResources and a restarted hostlet read back), then the task,
// with the spec put back if the task refuses. Zero values are left as they
// are: a limit is never removed in place, as with CRI.
func (r *Runtime) UpdateContainerResources(ctx context.Context, id string, res Resources) error {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	old, err := c.Spec(ctx)
	if err != nil {
		return err
	}
	spec, err := copySpec(old)
	if err != nil {
		return err
	}
	lr := linuxResources(spec)
	if res.CPUShares > 0 {
		lr.CPU.Shares = &res.CPUShares
	}
	if res.CPUQuota > 0 {
		lr.CPU.Quota = &res.CPUQuota
	}
	if res.CPUPeriod > 0 {
		lr.CPU.Period = &res.CPUPeriod
	}
	if res.MemoryLimit > 0 {
		switch m := lr.Memory; {
		case res.MemorySwap != 0:
			// As CRI's update: the memory+swap limit the pod spec makes
			// (NoSwap on v1: equal to the memory limit), so a live resize
			// keeps what the container was created with.
			m.Swap = &res.MemorySwap
		case m.Swap != nil && m.Limit != nil && *m.Swap > 0 && *m.Limit > 0:
			// Else the old one moves with the memory limit, keeping the
			// swap it allows: the kernel refuses a memory limit above it.
			swap := res.MemoryLimit + (*m.Swap - *m.Limit)
			m.Swap = &swap
		}
		lr.Memory.Limit = &res.MemoryLimit
	}
	if len(res.Unified) > 0 && CgroupV2() {
		// memory.swap.max of LimitedSwap follows the memory request.
		if lr.Unified == nil {
			lr.Unified = map[string]string{}
		}
		for k, v := range res.Unified {
			lr.Unified[k] = v
		}
	}
	if err := r.storeSpec(ctx, id, spec); err != nil {
		return fmt.Errorf("updating container %s spec: %w", id, err)
	}
	task, err := c.Task(ctx, nil)
	if err == nil {
		err = task.Update(ctx, containerd.WithResources(lr))
	}
	if err != nil {
		if rerr := r.storeSpec(context.WithoutCancel(ctx), id, old); rerr != nil {
			return fmt.Errorf("updating container %s resources: %w (and restoring its spec: %v)", id, err, rerr)
		}
		return fmt.Errorf("updating container %s resources: %w", id, err)
	}
	return nil
}

// ContainerResources returns the cgroup settings in a container's spec: what
// it was created with, or last updated to.
func (r *Runtime) ContainerResources(ctx context.Context, id string) (Resources, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return Resources{}, err
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return Resources{}, err
	}
	var out Resources
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return out, nil
	}
	if cpu := spec.Linux.Resources.CPU; cpu != nil {
		if cpu.Shares != nil {
			out.CPUShares = *cpu.Shares
		}
		if cpu.Quota != nil {
			out.CPUQuota = *cpu.Quota
		}
		if cpu.Period != nil {
			out.CPUPeriod = *cpu.Period
		}
	}
	if m := spec.Linux.Resources.Memory; m != nil {
		if m.Limit != nil {
			out.MemoryLimit = *m.Limit
		}
		if m.Swap != nil {
			out.MemorySwap = *m.Swap
		}
	}
	out.Unified = spec.Linux.Resources.Unified
	return out, nil
}

// MemoryUsage is a running container's memory usage (its cgroup's, page
// cache included), which a lower memory limit must stay above.
func (r *Runtime) MemoryUsage(ctx context.Context, id string) (uint64, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return 0, err
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return 0, err
	}
	m, err := task.Metrics(namespaces.WithNamespace(ctx, r.ns))
	if err != nil {
		return 0, err
	}
	st, err := decodeMetric(m)
	if err != nil {
		return 0, err
	}
	return st.MemoryUsage, nil
}

// storeSpec replaces only the container's spec, so labels set meanwhile
// (an exit, a back-off) are kept.
func (r *Runtime) storeSpec(ctx context.Context, id string, spec *oci.Spec) error {
	ctx = namespaces.WithNamespace(ctx, r.ns)
	info, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return err
	}
	if info.Spec, err = typeurl.MarshalAny(spec); err != nil {
		return err
	}
	_, err = r.client.ContainerService().Update(ctx, info, "spec")
	return err
}

func copySpec(s *oci.Spec) (*oci.Spec, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var out oci.Spec
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// linuxResources is the spec's cgroup settings, with the CPU and memory
// parts present.
func linuxResources(s *oci.Spec) *specs.LinuxResources {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
	lr := s.Linux.Resources
	if lr.CPU == nil {
		lr.CPU = &specs.LinuxCPU{}
	}
	if lr.Memory == nil {
		lr.Memory = &specs.LinuxMemory{}
	}
	return lr
}

// PodCgroupState is what a pod's cgroup is set to now, read back as the
// kubelet's GetPodCgroupConfig does (CPU shares from cpu.weight on v2),
// and the memory its processes use.
type PodCgroupState struct {
	// MemoryLimit and CPUQuota are -1 when unlimited.
	MemoryLimit, CPUQuota int64
	CPUShares             uint64
	MemoryUsage           uint64
}

// PodCgroupState reads the pod's cgroup; ok is false when it has none
// (--cgroups-per-qos=false).
func (r *Runtime) PodCgroupState(uid, qos string) (PodCgroupState, bool, error) {
	return r.cgroups.podState(uid, qos)
}

func (c *Cgroups) podState(uid, qos string) (PodCgroupState, bool, error) {
	var out PodCgroupState
	if c == nil || !c.perQOS {
		return out, false, nil
	}
	n, err := c.podName(uid, qos)
	if err != nil {
		return out, false, err
	}
	m, _, err := c.manager(n, nil)
	if err != nil {
		return out, false, err
	}
	if !m.Exists() {
		// A pod made before hostlet made pod cgroups: nothing to resize.
		return out, false, nil
	}
	read := func(subsys, file string) (string, error) {
		v, err := cgroups.ReadFile(m.Path(subsys), file)
		return strings.TrimSpace(v), err
	}
	var mem, quota, shares string
	if c.v2 {
		var cpuMax, weight string
		if mem, err = read("", "memory.max"); err == nil {
			if cpuMax, err = read("", "cpu.max"); err == nil {
				weight, err = read("", "cpu.weight")
			}
		}
		if err != nil {
			return out, false, err
		}
		quota, _, _ = strings.Cut(cpuMax, " ")
		w, err := strconv.ParseUint(weight, 10, 64)
		if err != nil {
			return out, false, fmt.Errorf("cpu.weight of pod %s: %w", uid, err)
		}
		// The kubelet's CPUWeightToCPUShares, the inverse of CPUWeight.
		shares = strconv.FormatUint((w-1)*(MaxShares-MinShares)/9999+MinShares, 10)
	} else {
		if mem, err = read("memory", "memory.limit_in_bytes"); err == nil {
			if quota, err = read("cpu", "cpu.cfs_quota_us"); err == nil {
				shares, err = read("cpu", "cpu.shares")
			}
		}
		if err != nil {
			return out, false, err
		}
	}
	limit := func(v string) (int64, error) {
		if v == "max" {
			return -1, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, err
		}
		// v1 says "unlimited" with the largest page-aligned value.
		if n >= 1<<62 {
			return -1, nil
		}
		return int64(n), nil
	}
	if quota == "-1" {
		quota = "max"
	}
	if out.MemoryLimit, err = limit(mem); err == nil {
		if out.CPUQuota, err = limit(quota); err == nil {
			out.CPUShares, err = strconv.ParseUint(shares, 10, 64)
		}
	}
	if err != nil {
		return out, false, fmt.Errorf("reading cgroup of pod %s: %w", uid, err)
	}
	st, err := m.GetStats()
	if err != nil {
		return out, false, err
	}
	out.MemoryUsage = st.MemoryStats.Usage.Usage
	return out, true, nil
}

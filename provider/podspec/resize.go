package podspec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"github.com/hostlet/hostlet/lifecycle"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// allocationFile keeps a pod's allocated resources in its pod dir, as the
// kubelet checkpoints them: a restarted hostlet neither forgets a resize
// it admitted nor applies one it did not.
const allocationFile = "allocated_resources"

func (r *Runtime) allocationPath(uid types.UID) string {
	return filepath.Join(r.layout().PodDir(uid), allocationFile)
}

// SaveAllocation records what the node admitted for a pod's containers.
func (r *Runtime) SaveAllocation(uid types.UID, a lifecycle.Allocation) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	path := r.allocationPath(uid)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return renameio.WriteFile(path, b, 0o600, renameio.WithTempDir(filepath.Dir(path)))
}

// LoadAllocation reads a pod's recorded allocation; ok is false when there
// is none (a pod not admitted yet).
func (r *Runtime) LoadAllocation(uid types.UID) (lifecycle.Allocation, bool) {
	b, err := os.ReadFile(r.allocationPath(uid))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	var a lifecycle.Allocation
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil {
		// The pod's spec stands in, as for a pod admitted anew.
		log.WithError(err).WithField("uid", uid).Warn("reading the pod's allocated resources")
		return nil, false
	}
	return a, true
}

// ResizeContainer configures a running container with c's CPU and memory,
// refusing a memory limit below what it uses now, as the kubelet does
// before it asks the runtime.
func (r *Runtime) ResizeContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) error {
	want := r.containerResources(pod, c)
	cur, err := r.rt.ContainerResources(ctx, id)
	if err != nil {
		return err
	}
	if want.MemoryLimit > 0 && (cur.MemoryLimit <= 0 || want.MemoryLimit < cur.MemoryLimit) {
		usage, err := r.rt.MemoryUsage(ctx, id)
		if err != nil {
			return fmt.Errorf("cannot decrease memory limits: missing container %q memory usage", c.Name)
		}
		if usage >= uint64(want.MemoryLimit) {
			return fmt.Errorf("cannot decrease memory limits: attempting to set container %q memory limit (%d) below current usage (%d)", c.Name, want.MemoryLimit, usage)
		}
	}
	return r.rt.UpdateContainerResources(ctx, id, want)
}

// ContainerResources is what a container runs with, read from its cgroup
// settings: c's own requests and limits when those are what c's resources
// configure, else the values they stand for (CPU from shares and quota, as
// the kubelet reads CRI's; the memory request, which no cgroup holds, is
// c's).
func (r *Runtime) ContainerResources(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) (v1.ResourceRequirements, error) {
	got, err := r.rt.ContainerResources(ctx, id)
	if err != nil {
		return v1.ResourceRequirements{}, err
	}
	want := r.containerResources(pod, c)
	out := *c.Resources.DeepCopy()
	if got.CPUShares == want.CPUShares && got.CPUQuota == want.CPUQuota && got.MemoryLimit == want.MemoryLimit {
		return out, nil
	}
	if out.Requests == nil {
		out.Requests = v1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = v1.ResourceList{}
	}
	if got.CPUShares > minShares {
		out.Requests[v1.ResourceCPU] = *resource.NewMilliQuantity(int64((got.CPUShares*1000+1023)/1024), resource.DecimalSI)
	}
	delete(out.Limits, v1.ResourceCPU)
	if got.CPUQuota > 0 && got.CPUPeriod > 0 {
		out.Limits[v1.ResourceCPU] = *resource.NewMilliQuantity(got.CPUQuota*1000/int64(got.CPUPeriod), resource.DecimalSI)
	}
	delete(out.Limits, v1.ResourceMemory)
	if got.MemoryLimit > 0 {
		out.Limits[v1.ResourceMemory] = *resource.NewQuantity(got.MemoryLimit, resource.BinarySI)
	}
	return out, nil
}

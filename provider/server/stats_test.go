package server

import (
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

func TestNanoCores(t *testing.T) {
	var c cpuRates
	t0 := time.Unix(1000, 0)
	if r := c.nanoCores("a", 5e9, t0); r != nil {
		t.Errorf("first sample gave a rate: %d", *r)
	}
	// 1.5 s of CPU in 2 s: 0.75 cores.
	if r := c.nanoCores("a", 6.5e9, t0.Add(2*time.Second)); r == nil || *r != 750_000_000 {
		t.Errorf("rate %v, want 750000000", r)
	}
	// The same or an older sample (a concurrent request): no rate, and
	// the newer sample stays.
	if r := c.nanoCores("a", 6.5e9, t0.Add(2*time.Second)); r != nil {
		t.Errorf("same sample gave a rate: %d", *r)
	}
	if r := c.nanoCores("a", 6e9, t0.Add(time.Second)); r != nil {
		t.Errorf("older sample gave a rate: %d", *r)
	}
	// A counter that went back is a new container: no rate, then from it.
	if r := c.nanoCores("a", 1e9, t0.Add(3*time.Second)); r != nil {
		t.Errorf("reset counter gave a rate: %d", *r)
	}
	if r := c.nanoCores("a", 3e9, t0.Add(7*time.Second)); r == nil || *r != 500_000_000 {
		t.Errorf("rate after reset %v, want 500000000", r)
	}
	c.forget(map[string]bool{"b": true})
	if r := c.nanoCores("a", 4e9, t0.Add(8*time.Second)); r != nil {
		t.Errorf("forgotten key gave a rate: %d", *r)
	}
}

func TestContainerAndPodStats(t *testing.T) {
	at := time.Unix(2000, 0)
	started := metav1.NewTime(time.Unix(1900, 0))
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")}}},
		{Name: "b"},
	}}}
	limits := memoryLimits(pod)
	a := containerStats(v1.ContainerStatus{Name: "a", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}}},
		runtime.ContainerStats{Time: at, CPUUsageNanos: 2e9, MemoryUsage: 90 << 20, WorkingSet: 64 << 20, RSS: 60 << 20, PageFaults: 5, MajorPageFaults: 1},
		limits["a"])
	b := containerStats(v1.ContainerStatus{Name: "b"},
		runtime.ContainerStats{Time: at.Add(-time.Second), CPUUsageNanos: 1e9, MemoryUsage: 20 << 20, WorkingSet: 10 << 20, RSS: 8 << 20, PageFaults: 2},
		limits["b"])
	if !a.StartTime.Equal(&started) || *a.Memory.AvailableBytes != 36<<20 || *a.Memory.WorkingSetBytes != 64<<20 {
		t.Errorf("container a: start %v available %v", a.StartTime, a.Memory.AvailableBytes)
	}
	if b.Memory.AvailableBytes != nil {
		t.Errorf("container b without a limit has available %d", *b.Memory.AvailableBytes)
	}
	a.CPU.UsageNanoCores, b.CPU.UsageNanoCores = ptr.To[uint64](300), ptr.To[uint64](200)
	cpu, mem := podSums([]statsv1alpha1.ContainerStats{a, b})
	if *cpu.UsageCoreNanoSeconds != 3e9 || *cpu.UsageNanoCores != 500 || !cpu.Time.Time.Equal(at) {
		t.Errorf("pod cpu %+v", cpu)
	}
	if *mem.WorkingSetBytes != 74<<20 || *mem.UsageBytes != 110<<20 || *mem.RSSBytes != 68<<20 || *mem.PageFaults != 7 || *mem.MajorPageFaults != 1 {
		t.Errorf("pod memory %+v", mem)
	}
	// One container without a rate yet: the pod has none either.
	b.CPU.UsageNanoCores = nil
	if cpu, _ := podSums([]statsv1alpha1.ContainerStats{a, b}); cpu.UsageNanoCores != nil {
		t.Errorf("pod rate %d with a container without one", *cpu.UsageNanoCores)
	}
	if cpu, mem := podSums(nil); cpu != nil || mem != nil {
		t.Error("a pod without containers has sums")
	}
}

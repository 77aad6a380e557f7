package server

import (
	"context"

	"github.com/hostlet/hostlet/provider/node"
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

// logDirRuntime has the pods' log directories only.
type logDirRuntime struct {
	Runtime
	dir string
}

func (r logDirRuntime) LogDir(string, string, string) string { return r.dir }

func TestCgroupCPUMemoryAndSwap(t *testing.T) {
	at := time.Unix(3000, 0)
	cg := runtime.CgroupStats{Time: at, CPU: runtime.CgroupCPU{Total: 7e9},
		Memory: runtime.CgroupMemoryStats{Usage: 50 << 20, WorkingSet: 30 << 20, RSS: 20 << 20, Swap: 1 << 20, PageFaults: 9, MajorPageFaults: 2},
		Spec:   runtime.CgroupSpec{HasMemory: true, MemoryLimit: 160 << 20, SwapLimit: 160 << 20}}
	cpu, mem := cgroupCPUMemory(cg, ptr.To[uint64](42))
	// cgroup v1 keeps no PSI: zeros, as cAdvisor's for the kubelet.
	zero := statsv1alpha1.PSIStats{}
	if *cpu.UsageCoreNanoSeconds != 7e9 || *cpu.UsageNanoCores != 42 || !cpu.Time.Time.Equal(at) || cpu.PSI == nil || *cpu.PSI != zero {
		t.Errorf("cpu %+v", cpu)
	}
	if *mem.AvailableBytes != 130<<20 || *mem.WorkingSetBytes != 30<<20 || *mem.UsageBytes != 50<<20 || *mem.RSSBytes != 20<<20 ||
		*mem.PageFaults != 9 || *mem.MajorPageFaults != 2 || mem.PSI == nil || *mem.PSI != zero {
		t.Errorf("memory %+v", mem)
	}
	if io := cgroupIO(cg); io.PSI == nil || *io.PSI != zero || !io.Time.Time.Equal(at) {
		t.Errorf("io %+v", io)
	}
	// v2's lines, each resource its own.
	v2 := cg
	v2.Pressure = &runtime.CgroupPressure{
		CPU:    runtime.PSI{Some: runtime.PSIData{Avg10: 1.5, Avg60: 1, Avg300: 0.5, Total: 100}, Full: runtime.PSIData{Total: 10}},
		Memory: runtime.PSI{Some: runtime.PSIData{Total: 200}, Full: runtime.PSIData{Avg10: 2, Total: 20}},
		IO:     runtime.PSI{Some: runtime.PSIData{Total: 300}},
	}
	cpu, mem = cgroupCPUMemory(v2, nil)
	if p := cpu.PSI; p.Some != (statsv1alpha1.PSIData{Avg10: 1.5, Avg60: 1, Avg300: 0.5, Total: 100}) || p.Full.Total != 10 {
		t.Errorf("cpu psi %+v", p)
	}
	if p := mem.PSI; p.Some.Total != 200 || p.Full != (statsv1alpha1.PSIData{Avg10: 2, Total: 20}) {
		t.Errorf("memory psi %+v", p)
	}
	if p := cgroupIO(v2).PSI; p.Some.Total != 300 || p.Full.Total != 0 {
		t.Errorf("io psi %+v", p)
	}
	// v1's memsw limit is memory and swap together, as cAdvisor's spec
	// has it: the kubelet subtracts the swap used from it.
	if sw := cgroupSwap(cg); *sw.SwapUsageBytes != 1<<20 || *sw.SwapAvailableBytes != 159<<20 || !sw.Time.Time.Equal(at) {
		t.Errorf("swap %+v", sw)
	}
	// Unlimited (v1's near 2^63, v2's max): no availableBytes.
	cg.Spec.MemoryLimit, cg.Spec.SwapLimit = 9223372036854771712, 1<<64-1
	if _, mem := cgroupCPUMemory(cg, nil); mem.AvailableBytes != nil {
		t.Errorf("unlimited cgroup has available %d", *mem.AvailableBytes)
	}
	if sw := cgroupSwap(cg); sw.SwapAvailableBytes != nil || *sw.SwapUsageBytes != 1<<20 {
		t.Errorf("unlimited swap %+v", sw)
	}
	// Without the memory controller: a zero working set only, no swap.
	cg.Spec.HasMemory = false
	if _, mem := cgroupCPUMemory(cg, nil); *mem.WorkingSetBytes != 0 || mem.UsageBytes != nil || mem.AvailableBytes != nil {
		t.Errorf("memory without the controller %+v", mem)
	}
	if sw := cgroupSwap(cg); sw != nil {
		t.Errorf("swap without the controller %+v", sw)
	}
}

// TestPodCgroupStats: a pod with its own cgroup has its CPU, memory and
// swap from it (the pod limit making availableBytes), its containers'
// swap from theirs and its process count their sum; a container whose
// cgroup is gone counts none.
func TestPodCgroupStats(t *testing.T) {
	at := time.Unix(4000, 0)
	const cid, cid2 = "c1", "c2"
	limited := runtime.CgroupSpec{HasMemory: true, MemoryLimit: 80e6, SwapLimit: 80e6}
	podCg := runtime.CgroupStats{Time: at, CPU: runtime.CgroupCPU{Total: 5e9},
		Memory: runtime.CgroupMemoryStats{Usage: 3e6, WorkingSet: 2e6, RSS: 1e6, PageFaults: 100}, Spec: limited}
	ctrCg := runtime.CgroupStats{Time: at, Processes: 2, Memory: runtime.CgroupMemoryStats{Swap: 4096}, Spec: limited}
	ctr2Cg := runtime.CgroupStats{Time: at, Processes: 1, Spec: runtime.CgroupSpec{HasMemory: true, MemoryLimit: 1 << 63, SwapLimit: 1 << 63}}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"},
		Spec: v1.PodSpec{Containers: []v1.Container{
			{Name: "app", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("80M")}}},
			{Name: "side"}, {Name: "gone"},
		}},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
			{Name: "app", ContainerID: "containerd://" + cid},
			{Name: "side", ContainerID: "containerd://" + cid2},
			{Name: "gone", ContainerID: "containerd://c3"},
		}},
	}
	s := &server{cfg: Config{
		Stats:   fakeStats{},
		Usage:   fakeUsage{},
		Runtime: logDirRuntime{dir: t.TempDir()},
		Cgroups: fakeCgroups{stats: map[string]runtime.CgroupStats{
			"/kubepods/burstable/poduid1":         podCg,
			"/kubepods/burstable/poduid1/" + cid:  ctrCg,
			"/kubepods/burstable/poduid1/" + cid2: ctr2Cg,
		}},
	}}
	samples := map[string]runtime.ContainerStats{
		cid:  {Time: at, CPUUsageNanos: 3e9, MemoryUsage: 2e6, WorkingSet: 1.5e6},
		cid2: {Time: at, CPUUsageNanos: 1e9, MemoryUsage: 5e5, WorkingSet: 2e5},
		"c3": {Time: at, CPUUsageNanos: 1e6},
	}
	imageFs := node.FsStats(t.TempDir(), metav1.Now())
	for _, full := range []bool{true, false} {
		var fs *statsv1alpha1.FsStats
		if full {
			fs = imageFs
		}
		seen := map[string]bool{}
		ps := s.podStats(context.Background(), pod, samples, seen, fs)
		if *ps.CPU.UsageCoreNanoSeconds != 5e9 || *ps.Memory.WorkingSetBytes != 2e6 || *ps.Memory.AvailableBytes != 78e6 || *ps.Memory.PageFaults != 100 {
			t.Errorf("full %v: pod cpu %+v memory %+v", full, ps.CPU, ps.Memory)
		}
		if !seen["pod/uid1"] {
			t.Errorf("full %v: the pod's CPU sample is not kept", full)
		}
		if ps.Swap == nil || *ps.Swap.SwapAvailableBytes != 80e6 {
			t.Errorf("full %v: pod swap %+v", full, ps.Swap)
		}
		if len(ps.Containers) != 3 {
			t.Fatalf("full %v: %d containers", full, len(ps.Containers))
		}
		app, side, gone := ps.Containers[0], ps.Containers[1], ps.Containers[2]
		if app.Swap == nil || *app.Swap.SwapUsageBytes != 4096 || *app.Swap.SwapAvailableBytes != 80e6-4096 {
			t.Errorf("full %v: app swap %+v", full, app.Swap)
		}
		if side.Swap == nil || side.Swap.SwapAvailableBytes != nil || gone.Swap != nil {
			t.Errorf("full %v: side swap %+v, gone %+v", full, side.Swap, gone.Swap)
		}
		// PSI (zeros on v1) where the cgroup was read; I/O in the full
		// summary only.
		if app.CPU.PSI == nil || app.Memory.PSI == nil || ps.CPU.PSI == nil || ps.Memory.PSI == nil || gone.CPU.PSI != nil {
			t.Errorf("full %v: psi app %+v %+v pod %+v %+v gone %+v", full, app.CPU.PSI, app.Memory.PSI, ps.CPU.PSI, ps.Memory.PSI, gone.CPU.PSI)
		}
		if (app.IO != nil) != full || (ps.IO != nil) != full || gone.IO != nil {
			t.Errorf("full %v: io app %+v pod %+v gone %+v", full, app.IO, ps.IO, gone.IO)
		}
		switch {
		case full && (ps.ProcessStats == nil || *ps.ProcessStats.ProcessCount != 3):
			t.Errorf("pod processes %+v, want 3", ps.ProcessStats)
		case !full && ps.ProcessStats != nil:
			t.Errorf("only CPU and memory has processes %d", *ps.ProcessStats.ProcessCount)
		}
	}
	// Without a pod cgroup of its own: the containers' sums, no swap, as
	// before.
	other := pod.DeepCopy()
	other.UID = "uid2"
	ps := s.podStats(context.Background(), other, samples, map[string]bool{}, nil)
	if *ps.CPU.UsageCoreNanoSeconds != 4e9+1e6 || ps.Swap != nil || ps.ProcessStats != nil {
		t.Errorf("pod without a cgroup: cpu %+v swap %+v processes %+v", ps.CPU, ps.Swap, ps.ProcessStats)
	}
}

// The system containers from their cgroups, the kubelet's started when
// hostlet did; I/O in the full summary only; one unreadable left out.
func TestSystemContainersStats(t *testing.T) {
	created := time.Unix(100, 0)
	cg := runtime.CgroupStats{Time: time.Unix(5000, 0), Created: created, CPU: runtime.CgroupCPU{Total: 1e9},
		Memory: runtime.CgroupMemoryStats{Usage: 2e6, WorkingSet: 1e6}, Spec: runtime.CgroupSpec{HasMemory: true, MemoryLimit: 1 << 63, SwapLimit: 1 << 63}}
	s := &server{cfg: Config{
		Cgroups:          fakeCgroups{stats: map[string]runtime.CgroupStats{"/k": cg, "/kubepods": cg}},
		SystemContainers: map[string]string{"kubelet": "/k", "pods": "/kubepods", "misc": "/gone"},
	}}
	for _, full := range []bool{true, false} {
		got := s.systemContainers(map[string]bool{}, full)
		if len(got) != 2 || got[0].Name != "kubelet" || got[1].Name != "pods" {
			t.Fatalf("system containers %+v", got)
		}
		if !got[0].StartTime.Equal(&agentStart) || !got[1].StartTime.Time.Equal(created) {
			t.Errorf("start times %v %v", got[0].StartTime, got[1].StartTime)
		}
		if got[1].Memory.AvailableBytes != nil || got[1].Swap == nil || got[1].CPU.PSI == nil || (got[1].IO != nil) != full {
			t.Errorf("full %v: pods %+v", full, got[1])
		}
	}
}

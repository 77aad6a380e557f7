package podspec

import (
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func resList(cpu, memory string) v1.ResourceList {
	out := v1.ResourceList{}
	if cpu != "" {
		out[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		out[v1.ResourceMemory] = resource.MustParse(memory)
	}
	return out
}

func podWith(containers ...v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{}
	for _, r := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Resources: r})
	}
	return p
}

func req(requests, limits v1.ResourceList) v1.ResourceRequirements {
	return v1.ResourceRequirements{Requests: requests, Limits: limits}
}

// The kubelet's TestResourceConfigForPod cases (enforced CFS quota,
// default period), value for value.
func TestPodCgroupResources(t *testing.T) {
	type want struct {
		shares uint64
		quota  *int64
		memory *int64
		period bool
	}
	i := func(v int64) *int64 { return &v }
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want want
	}{
		"besteffort":          {podWith(req(resList("", ""), resList("", ""))), want{shares: 2}},
		"burstable-no-limits": {podWith(req(resList("100m", "100Mi"), resList("", ""))), want{shares: 102}},
		"burstable-with-limits": {podWith(req(resList("100m", "100Mi"), resList("200m", "200Mi"))),
			want{shares: 102, quota: i(20000), period: true, memory: i(200 << 20)}},
		"burstable-partial-limits": {podWith(req(resList("100m", "100Mi"), resList("200m", "200Mi")), req(resList("100m", "100Mi"), resList("", ""))),
			want{shares: 204}},
		"guaranteed": {podWith(req(resList("100m", "100Mi"), resList("100m", "100Mi"))),
			want{shares: 102, quota: i(10000), period: true, memory: i(100 << 20)}},
		"guaranteed-tiny-cpu": {podWith(req(resList("5m", "100Mi"), resList("5m", "100Mi"))),
			want{shares: 5, quota: i(1000), period: true, memory: i(100 << 20)}},
	} {
		got := PodCgroupResources(tc.pod, CFSQuota{})
		if got.CPUShares == nil || *got.CPUShares != tc.want.shares {
			t.Errorf("%s: shares %v, want %d", name, got.CPUShares, tc.want.shares)
		}
		if (got.CPUQuota == nil) != (tc.want.quota == nil) || (got.CPUQuota != nil && *got.CPUQuota != *tc.want.quota) {
			t.Errorf("%s: quota %v, want %v", name, got.CPUQuota, tc.want.quota)
		}
		if (got.CPUPeriod != nil) != tc.want.period || (got.CPUPeriod != nil && *got.CPUPeriod != runtime.QuotaPeriod) {
			t.Errorf("%s: period %v", name, got.CPUPeriod)
		}
		if (got.Memory == nil) != (tc.want.memory == nil) || (got.Memory != nil && *got.Memory != *tc.want.memory) {
			t.Errorf("%s: memory %v, want %v", name, got.Memory, tc.want.memory)
		}
	}
}

// Pod-level resources (PodLevelResources, on by default) declare the
// limits for the pod cgroup even when containers do not.
func TestPodCgroupResourcesPodLevel(t *testing.T) {
	p := podWith(req(resList("", ""), resList("", "")))
	p.Spec.Resources = &v1.ResourceRequirements{Requests: resList("500m", "64Mi"), Limits: resList("1", "128Mi")}
	got := PodCgroupResources(p, CFSQuota{})
	if *got.CPUShares != 512 || got.CPUQuota == nil || *got.CPUQuota != 100000 || got.Memory == nil || *got.Memory != 128<<20 {
		t.Errorf("pod-level: shares %d quota %v memory %v", *got.CPUShares, got.CPUQuota, got.Memory)
	}
}

// Pod overhead (spec.overhead, which the RuntimeClass admission plugin
// sets from the pod's RuntimeClass) is in the pod cgroup, as the kubelet's
// ResourceConfigForPod has it: added to the requests, and to the limits
// the pod has.
func TestPodCgroupResourcesOverhead(t *testing.T) {
	g := podWith(req(resList("100m", "100Mi"), resList("100m", "100Mi")))
	g.Spec.Overhead = resList("250m", "120Mi")
	got := PodCgroupResources(g, CFSQuota{})
	if *got.CPUShares != 358 || *got.CPUQuota != 35000 || *got.Memory != 220<<20 {
		t.Errorf("guaranteed with overhead: shares %d quota %d memory %d", *got.CPUShares, *got.CPUQuota, *got.Memory)
	}
	b := podWith(req(resList("100m", ""), resList("", "100Mi")))
	b.Spec.Overhead = resList("250m", "120Mi")
	got = PodCgroupResources(b, CFSQuota{})
	if *got.CPUShares != 358 || got.CPUQuota != nil || *got.Memory != 220<<20 {
		t.Errorf("burstable with overhead: shares %d quota %v memory %d", *got.CPUShares, got.CPUQuota, *got.Memory)
	}
}

func TestBurstableMilliCPU(t *testing.T) {
	pods := []*v1.Pod{
		podWith(req(resList("100m", ""), nil)),
		podWith(req(resList("250m", "1Mi"), resList("", "2Mi")), req(resList("50m", ""), nil)),
		podWith(req(resList("1", "1Mi"), resList("1", "1Mi"))), // Guaranteed
		podWith(req(nil, nil)), // BestEffort
	}
	if got := BurstableMilliCPU(pods); got != 400 {
		t.Errorf("burstable requests = %dm, want 400m", got)
	}
}

// A resize's pod-level steps: growing sets only what rises (unlimited
// counts as the highest), shrinking only what falls.
func TestResizeStep(t *testing.T) {
	mem, quota, shares, period := int64(256<<20), int64(40000), uint64(512), uint64(100000)
	want := runtime.PodResources{Memory: &mem, CPUQuota: &quota, CPUPeriod: &period, CPUShares: &shares}
	cur := runtime.PodCgroupState{MemoryLimit: 128 << 20, CPUQuota: -1, CPUShares: 1024}
	grow := resizeStep(want, cur, true)
	if grow.Memory == nil || *grow.Memory != mem || grow.CPUQuota != nil || grow.CPUShares != nil {
		t.Errorf("grow sets %+v, want the memory limit only", grow)
	}
	shrink := resizeStep(want, cur, false)
	if shrink.Memory != nil || shrink.CPUQuota == nil || *shrink.CPUQuota != quota || *shrink.CPUPeriod != period || shrink.CPUShares == nil || *shrink.CPUShares != shares {
		t.Errorf("shrink sets %+v, want the quota and shares", shrink)
	}
	if same := resizeStep(want, runtime.PodCgroupState{MemoryLimit: mem, CPUQuota: quota, CPUShares: shares}, true); same.Memory != nil || same.CPUQuota != nil || same.CPUShares != nil {
		t.Errorf("an unchanged pod sets %+v", same)
	}
}

package podspec

import (
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

// cpuCFSQuota and cpuCFSQuotaPeriod as the kubelet's runtime manager
// takes them: a custom period only with CustomCPUCFSQuotaPeriod.
func TestNewCFSQuota(t *testing.T) {
	if q := NewCFSQuota(true, 100*time.Millisecond, false); q != (CFSQuota{}) {
		t.Errorf("defaults: %+v, want the zero value", q)
	}
	if q := NewCFSQuota(false, 100*time.Millisecond, false); !q.Off || q.period() != runtime.QuotaPeriod {
		t.Errorf("cpuCFSQuota false: %+v", q)
	}
	if q := NewCFSQuota(true, 5*time.Millisecond, true); q.Off || q.period() != 5000 {
		t.Errorf("a 5ms period with its gate: %+v", q)
	}
}

// A container's quota and period, as the kubelet's
// calculateLinuxResources: enforced, the period always and the quota of
// the limit (1ms at least); not enforced, neither.
func TestContainerCFSQuota(t *testing.T) {
	for _, tc := range []struct {
		cfs           CFSQuota
		milliCPU      int64
		quota         int64
		period        uint64
		name, comment string
	}{
		{CFSQuota{}, 500, 50000, 100000, "default", "half of 100ms"},
		{CFSQuota{}, 0, 0, 100000, "default, no limit", "the period without a quota"},
		{CFSQuota{}, 5, 1000, 100000, "default, tiny limit", "the kernel's 1ms minimum"},
		{CFSQuota{Period: 5000}, 500, 2500, 5000, "5ms period", "half of 5ms"},
		{CFSQuota{Period: 5000}, 100, 1000, 5000, "5ms period, small limit", "1ms minimum"},
		{CFSQuota{Off: true}, 500, 0, 0, "off", "no quota, no period"},
	} {
		quota, period := tc.cfs.container(tc.milliCPU)
		if quota != tc.quota || period != tc.period {
			t.Errorf("%s: quota %d period %d, want %d %d (%s)", tc.name, quota, period, tc.quota, tc.period, tc.comment)
		}
	}
}

// A pod's cgroup under cpuCFSQuota false, as the kubelet's
// ResourceConfigForPod with enforceCPULimits false: where the quota would
// be, an unlimited one (-1) over the period; the shares and memory limit
// as with the quota on. A custom period is the pod's too.
func TestPodCgroupResourcesCFSQuota(t *testing.T) {
	guaranteed := podWith(req(resList("500m", "100Mi"), resList("500m", "100Mi")))
	got := PodCgroupResources(guaranteed, CFSQuota{Off: true})
	if got.CPUQuota == nil || *got.CPUQuota != -1 || got.CPUPeriod == nil || *got.CPUPeriod != runtime.QuotaPeriod || *got.CPUShares != 512 || *got.Memory != 100<<20 {
		t.Errorf("guaranteed, quota off: quota %v period %v shares %v memory %v", got.CPUQuota, got.CPUPeriod, got.CPUShares, got.Memory)
	}
	burstable := podWith(req(resList("100m", ""), resList("", "")))
	if got := PodCgroupResources(burstable, CFSQuota{Off: true}); got.CPUQuota != nil || got.CPUPeriod != nil {
		t.Errorf("burstable without CPU limits, quota off: quota %v period %v", got.CPUQuota, got.CPUPeriod)
	}
	got = PodCgroupResources(guaranteed, CFSQuota{Period: 10000})
	if *got.CPUQuota != 5000 || *got.CPUPeriod != 10000 {
		t.Errorf("guaranteed, 10ms period: quota %d period %d, want 5000 10000", *got.CPUQuota, *got.CPUPeriod)
	}
}

// A container's resources follow the settings: the node's CFS quota off
// leaves its CPU limit unenforced, its shares as they were.
func TestContainerResourcesCFSQuota(t *testing.T) {
	pod := podWith(req(resList("250m", "64Mi"), resList("500m", "64Mi")))
	c := &pod.Spec.Containers[0]
	for _, tc := range []struct {
		cfs    CFSQuota
		quota  int64
		period uint64
	}{{CFSQuota{}, 50000, 100000}, {CFSQuota{Off: true}, 0, 0}, {CFSQuota{Period: 20000}, 10000, 20000}} {
		r := &Runtime{cfg: Config{CFSQuota: tc.cfs, Node: fakeCapacity{}}}
		got := r.containerResources(pod, c)
		if got.CPUQuota != tc.quota || got.CPUPeriod != tc.period || got.CPUShares != 256 || got.MemoryLimit != 64<<20 {
			t.Errorf("%+v: %+v, want quota %d period %d shares 256", tc.cfs, got, tc.quota, tc.period)
		}
	}
}

type fakeCapacity struct{ Node }

func (fakeCapacity) Capacity() v1.ResourceList { return resList("4", "8Gi") }

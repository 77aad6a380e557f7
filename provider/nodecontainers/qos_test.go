package nodecontainers

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func memPod(qos v1.PodQOSClass, request, limit string) *v1.Pod {
	c := v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
	if request != "" {
		c.Resources.Requests[v1.ResourceMemory] = resource.MustParse(request)
	}
	if limit != "" {
		c.Resources.Limits[v1.ResourceMemory] = resource.MustParse(limit)
	}
	return &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{c}}, Status: v1.PodStatus{QOSClass: qos}}
}

// The kubelet's numbers: burstable = allocatable - percent of the
// Guaranteed requests, besteffort = that - percent of the Burstable
// requests; BestEffort pods count for nothing; pod-level requests win
// over the containers'.
func TestQOSMemoryLimits(t *testing.T) {
	const gi = int64(1 << 30)
	podLevel := memPod(v1.PodQOSBurstable, "100Mi", "")
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}
	pods := []*v1.Pod{
		memPod(v1.PodQOSGuaranteed, "2Gi", "2Gi"),
		memPod(v1.PodQOSGuaranteed, "1Gi", "1Gi"),
		memPod(v1.PodQOSBurstable, "1Gi", ""),
		podLevel,
		memPod(v1.PodQOSBestEffort, "", ""),
	}
	for _, tc := range []struct {
		percent               int64
		burstable, bestEffort int64
	}{
		{100, 16*gi - 3*gi, 16*gi - 3*gi - 2*gi},
		{50, 16*gi - 3*gi/2, 16*gi - 3*gi/2 - gi},
		{0, 16 * gi, 16 * gi},
	} {
		b, be := QOSMemoryLimits(pods, 16*gi, tc.percent)
		if b != tc.burstable || be != tc.bestEffort {
			t.Errorf("%d%%: burstable %d besteffort %d, want %d %d", tc.percent, b, be, tc.burstable, tc.bestEffort)
		}
	}
	// Requests past the allocatable: below zero, as the kubelet computes
	// them (the write fails and is retried at the usage).
	if b, be := QOSMemoryLimits(pods, 2*gi, 100); b != -gi || be != -3*gi {
		t.Errorf("overcommitted: %d %d", b, be)
	}
}

type fakeQOS struct {
	burstable, bestEffort int64
	calls                 int
	err                   error
}

func (f *fakeQOS) UpdateQOSMemory(b, be int64) error {
	f.burstable, f.bestEffort, f.calls = b, be, f.calls+1
	return f.err
}

// Update writes the limits; with no allocatable known it writes nothing,
// as the kubelet; a write's error is returned.
func TestQOSReserveUpdate(t *testing.T) {
	f := &fakeQOS{}
	q := &QOSReserve{Percent: 100, Allocatable: 1000 << 20, Cgroups: f}
	if err := q.Update([]*v1.Pod{memPod(v1.PodQOSGuaranteed, "100Mi", "100Mi")}); err != nil {
		t.Fatal(err)
	}
	if f.burstable != 900<<20 || f.bestEffort != 900<<20 {
		t.Errorf("limits %d %d", f.burstable, f.bestEffort)
	}
	q.Allocatable = 0
	if err := q.Update(nil); err != nil || f.calls != 1 {
		t.Errorf("without allocatable: %v, %d writes", err, f.calls)
	}
	q.Allocatable, f.err = 1, errors.New("EBUSY")
	if err := q.Update(nil); err == nil {
		t.Error("the write's error lost")
	}
	var none *QOSReserve
	if err := none.Update(nil); err != nil {
		t.Error(err)
	}
}

package node

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A resize above the node's allocatable is Infeasible with the kubelet's
// message, memory checked first; pod overhead counts.
func TestResizeFeasible(t *testing.T) {
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}
	requests := func(cpu, mem string) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		}
	}
	for _, tc := range []struct {
		name, msg string
		mut       func(*v1.Pod)
	}{
		{"fits", "", requests("2", "1Gi")},
		{"cpu", "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000", requests("3", "1Gi")},
		{"memory first", "Node didn't have enough capacity: memory, requested: 2147483648, capacity: 1073741824", requests("3", "2Gi")},
		{"overhead", "Node didn't have enough capacity: cpu, requested: 2100, capacity: 2000", func(p *v1.Pod) {
			requests("2", "1Mi")(p)
			p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
		}},
		{"static", "In-place resize of static-pods is not supported", func(p *v1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		}},
	} {
		reason, msg, ok := resizeFeasible(admitPod(tc.mut), alloc)
		if ok != (tc.msg == "") || msg != tc.msg || (!ok && reason != v1.PodReasonInfeasible) {
			t.Errorf("%s: got %q %q ok=%v, want %q", tc.name, reason, msg, ok, tc.msg)
		}
	}
}

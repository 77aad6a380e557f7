package node

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func preemptPod(name, cpuReq, cpuLim string) *v1.Pod {
	c := v1.Container{Name: "c"}
	if cpuReq != "" {
		c.Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq)}
	}
	if cpuLim != "" {
		c.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse("1Gi")}
		c.Resources.Requests[v1.ResourceMemory] = resource.MustParse("1Gi")
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: v1.PodSpec{Containers: []v1.Container{c}}}
}

func staticPod(name, cpu string) *v1.Pod {
	p := preemptPod(name, cpu, "")
	p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	return p
}

func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

// What is short is every resource, with the amount missing.
func TestInsufficient(t *testing.T) {
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("2")}
	running := []*v1.Pod{preemptPod("a", "600m", ""), preemptPod("b", "200m", "")}
	got := insufficient(staticPod("s", "500m"), alloc, running)
	if got.String() != "[(res: pods, q: 1), (res: cpu, q: 300)]" {
		t.Errorf("short %s", got)
	}
}

// The kubelet's choice: only preemptable pods; best-effort first, then the
// burstable pod closest to what is short; guaranteed pods last; critical
// pods never.
func TestPodsToPreempt(t *testing.T) {
	be := preemptPod("besteffort", "", "")
	small := preemptPod("small", "100m", "")
	big := preemptPod("big", "500m", "")
	guaranteed := preemptPod("guaranteed", "800m", "800m")
	critical := staticPod("critical", "900m")
	preemptor := staticPod("static", "400m")
	all := []*v1.Pod{be, small, big, guaranteed, critical}
	for _, tc := range []struct {
		reqs requirements
		want string
	}{
		{requirements{{v1.ResourcePods, 1}}, "besteffort"},
		{requirements{{v1.ResourceCPU, 400}}, "big"},
		{requirements{{v1.ResourceCPU, 100}}, "small"},
		{requirements{{v1.ResourceCPU, 550}}, "big,small"},
		{requirements{{v1.ResourceCPU, 1200}}, "big,guaranteed"},
	} {
		got, err := podsToPreempt(preemptor, all, tc.reqs)
		if err != nil || names(got) != tc.want {
			t.Errorf("%s: preempted %q (%v), want %q", tc.reqs, names(got), err, tc.want)
		}
	}
	if _, err := podsToPreempt(preemptor, all, requirements{{v1.ResourceCPU, 2000}}); err == nil {
		t.Error("more than the preemptable pods hold was found")
	}
	// A pod that is not critical preempts nothing but lower priorities.
	var lo, hi int32 = 1, 2
	low, high := preemptPod("low", "100m", ""), preemptPod("high", "100m", "")
	low.Spec.Priority, high.Spec.Priority = &lo, &hi
	if got, err := podsToPreempt(high, []*v1.Pod{low, be}, requirements{{v1.ResourceCPU, 100}}); err != nil || names(got) != "low" {
		t.Errorf("by priority: %q %v", names(got), err)
	}
}

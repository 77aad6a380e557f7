package main

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hostlet/hostlet/provider/podspec"
)

func burstablePod(uid, cpu string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: v1.PodSpec{Containers: []v1.Container{{
		Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

// The QoS cgroups count a resized pod at what was allocated to it, not at
// the spec asking for more, and a pod of the API without a worker yet at
// its spec; nothing while the API's pods are unknown.
func TestAllocatedPods(t *testing.T) {
	asked, waiting := burstablePod("resized", "2"), burstablePod("new", "300m")
	allocated := burstablePod("resized", "500m")
	done := burstablePod("done", "1")
	api := func() ([]*v1.Pod, bool) { return []*v1.Pod{asked, waiting, done}, true }
	// done's worker finished it: not among the active ones, not counted
	// from the API either.
	workers := func() ([]*v1.Pod, map[types.UID]bool) {
		return []*v1.Pod{allocated}, map[types.UID]bool{"resized": true, "done": true}
	}
	pods, ok := allocatedPods(api, workers)
	if !ok {
		t.Fatal("not ok")
	}
	if got := podspec.BurstableMilliCPU(pods); got != 800 {
		t.Errorf("burstable milli-CPU = %d, want 800 (500m allocated + 300m of the new pod)", got)
	}
	if _, ok := allocatedPods(func() ([]*v1.Pod, bool) { return nil, false }, workers); ok {
		t.Error("ok before the API's pods are known")
	}
}

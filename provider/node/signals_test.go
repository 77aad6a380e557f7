package node

import (
	"testing"

	"github.com/hostlet/hostlet/runtime"
	"k8s.io/apimachinery/pkg/api/resource"
)

type podsCgroupRuntime struct {
	Runtime
	mem runtime.CgroupMemory
}

func (r podsCgroupRuntime) PodsCgroupMemory() (runtime.CgroupMemory, error) { return r.mem, nil }

func TestAllocatableMemory(t *testing.T) {
	n := &Node{rt: podsCgroupRuntime{mem: runtime.CgroupMemory{Usage: 700, WorkingSet: 600, Limit: 1000}}}
	o, ok := n.allocatableMemory()
	if !ok || o.Available != 400 || o.Capacity != 1000 {
		t.Errorf("allocatableMemory.available = %+v (%v), want 400 of 1000", o, ok)
	}
	// No limit on kubepods: no signal, as the kubelet's summary has none.
	n.rt = podsCgroupRuntime{mem: runtime.CgroupMemory{Usage: 700, WorkingSet: 600}}
	if _, ok := n.allocatableMemory(); ok {
		t.Error("signal without a pods' cgroup limit")
	}
	ts, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"})
	if err != nil {
		t.Fatal(err)
	}
	with := ts.WithAllocatable()
	a, ok := with[SignalAllocatableMemoryAvailable]
	if !ok || a.Quantity.Cmp(resource.MustParse("100Mi")) != 0 || len(ts) != 2 {
		t.Errorf("WithAllocatable: %+v (original %d thresholds)", with, len(ts))
	}
	met := with.Met(Observations{SignalAllocatableMemoryAvailable: {Available: 50 << 20, Capacity: 1 << 30}})
	if len(met) != 1 || met[0].Signal != SignalAllocatableMemoryAvailable || Condition(met[0].Signal) != "MemoryPressure" {
		t.Errorf("met %+v", met)
	}
}

package node

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

type devicesStub struct {
	capacity, allocatable, assigned v1.ResourceList
	err                             error
}

func (d *devicesStub) Resources() (v1.ResourceList, v1.ResourceList, v1.ResourceList) {
	return d.capacity, d.allocatable, d.assigned
}
func (d *devicesStub) Allocate(*v1.Pod) error { return d.err }
func (d *devicesStub) Release(types.UID)      {}

func TestDevicesInStatusAndAdmission(t *testing.T) {
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	const r = v1.ResourceName("example.com/gpu")
	d := &devicesStub{
		capacity: v1.ResourceList{r: q(4)}, allocatable: v1.ResourceList{r: q(3)}, assigned: v1.ResourceList{r: q(4)},
		err: errors.New("requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0"),
	}
	n := &Node{cfg: Config{Devices: d}, node: &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourceCPU: q(2)}}}}
	capacity, allocatable := v1.ResourceList{}, v1.ResourceList{}
	n.withDevices(capacity, allocatable)
	if c, a := capacity[r], allocatable[r]; c.Value() != 4 || a.Value() != 3 {
		t.Errorf("status: capacity %v allocatable %v, want 4 (every device) 3 (healthy)", c.Value(), a.Value())
	}
	// Pods holding 4 devices after a restart still fit while the plugin
	// reports fewer (the kubelet's sanitizeNodeAllocatable).
	if a := n.allocatableForAdmission()[r]; a.Value() != 4 {
		t.Errorf("admission allocatable %v, want 4", a.Value())
	}
	reason, msg, ok := n.admitDevices(&v1.Pod{})
	want := "Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0, which is unexpected"
	if ok || reason != "UnexpectedAdmissionError" || msg != want {
		t.Errorf("admission: %v %q %q", ok, reason, msg)
	}
}

package node

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Devices is what the node reads of the device plugins (provider/devices):
// their resources for the status, and device assignment at admission.
type Devices interface {
	// Resources: capacity counts every device, allocatable the healthy
	// ones, assigned those pods hold.
	Resources() (capacity, allocatable, assigned v1.ResourceList)
	Allocate(pod *v1.Pod) error
	Release(uid types.UID)
}

// withDevices adds the device plugins' resources to the node's own.
func (n *Node) withDevices(capacity, allocatable v1.ResourceList) {
	if n.cfg.Devices == nil {
		return
	}
	c, a, _ := n.cfg.Devices.Resources()
	for name, q := range c {
		capacity[name] = q
	}
	for name, q := range a {
		allocatable[name] = q
	}
}

// admitDevices is the kubelet's resource allocation admit handler: the
// devices are assigned before the predicates run. ok is false with its
// reason and message when a plugin cannot give them.
func (n *Node) admitDevices(pod *v1.Pod) (string, string, bool) {
	if n.cfg.Devices == nil {
		return "", "", true
	}
	if err := n.cfg.Devices.Allocate(pod); err != nil {
		return "UnexpectedAdmissionError", fmt.Sprintf("Allocate failed due to %v, which is unexpected", err), false
	}
	return "", "", true
}

// allocatableForAdmission is the node's allocatable with each device
// resource at least what pods hold already: after a restart of hostlet the
// plugins may not have registered again, and the pods holding devices are
// re-admitted (the kubelet's sanitizeNodeAllocatable).
func (n *Node) allocatableForAdmission() v1.ResourceList {
	alloc := n.Allocatable()
	if n.cfg.Devices == nil {
		return alloc
	}
	_, _, assigned := n.cfg.Devices.Resources()
	for name, q := range assigned {
		if cur, ok := alloc[name]; !ok || cur.Cmp(q) < 0 {
			alloc[name] = q
		}
	}
	return alloc
}

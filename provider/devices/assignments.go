package devices

import (
	"k8s.io/apimachinery/pkg/util/sets"
)

// assignment is what one container holds of one resource: the device IDs
// and the plugin's Allocate answer for them (protobuf bytes, as the
// kubelet's checkpoint keeps it), applied each time the container starts.
type assignment struct {
	DeviceIDs []string `json:"deviceIDs"`
	Response  []byte   `json:"response,omitempty"`
}

// assignments is every device held, by pod UID, container name and
// resource name.
type assignments map[string]map[string]map[string]assignment

func (a assignments) get(pod, container, resource string) (assignment, bool) {
	x, ok := a[pod][container][resource]
	return x, ok
}

func (a assignments) set(pod, container, resource string, x assignment) {
	if a[pod] == nil {
		a[pod] = map[string]map[string]assignment{}
	}
	if a[pod][container] == nil {
		a[pod][container] = map[string]assignment{}
	}
	a[pod][container][resource] = x
}

// inUse is the set of a resource's devices any container holds.
func (a assignments) inUse(resource string) sets.Set[string] {
	out := sets.New[string]()
	for _, ctrs := range a {
		for _, res := range ctrs {
			out.Insert(res[resource].DeviceIDs...)
		}
	}
	return out
}

// count is how many devices of each resource are held.
func (a assignments) count() map[string]int {
	out := map[string]int{}
	for _, ctrs := range a {
		for _, res := range ctrs {
			for r, x := range res {
				out[r] += len(x.DeviceIDs)
			}
		}
	}
	return out
}

// retain drops the pods not in keep and reports whether any was dropped.
func (a assignments) retain(keep sets.Set[string]) bool {
	dropped := false
	for uid := range a {
		if !keep.Has(uid) {
			delete(a, uid)
			dropped = true
		}
	}
	return dropped
}

// pick chooses n devices: first those an init container of the same pod
// held (the kubelet hands them on, so a pod needs no more devices than its
// largest container), then the plugin's preferred ones still free, then
// the other free ones in ID order. ok is false when there are not enough.
func pick(n int, reuse []string, free sets.Set[string], preferred []string) (out []string, ok bool) {
	chosen := sets.New[string]()
	take := func(ids []string, check bool) {
		for _, id := range ids {
			if len(out) == n {
				return
			}
			if (!check || free.Has(id)) && !chosen.Has(id) {
				chosen.Insert(id)
				out = append(out, id)
			}
		}
	}
	take(reuse, false)
	take(preferred, true)
	take(sets.List(free), true)
	return out, len(out) == n
}

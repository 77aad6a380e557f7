package podspec

import (
	"testing"

	"k8s.io/utils/ptr"
)

// singleProcessOOMKill as the kubelet's: cgroup v2 kills the container's
// group unless it is true; cgroup v1 never, and refuses it false.
func TestOOMKillGroup(t *testing.T) {
	for _, tc := range []struct {
		v2     bool
		single *bool
		group  bool
		err    string
	}{
		{true, nil, true, ""},
		{true, ptr.To(false), true, ""},
		{true, ptr.To(true), false, ""},
		{false, nil, false, ""},
		{false, ptr.To(true), false, ""},
		{false, ptr.To(false), false, "invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1"},
	} {
		group, err := OOMKillGroup(tc.v2, tc.single)
		if group != tc.group || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("cgroup v2 %v, singleProcessOOMKill %v: %v %v, want %v %q", tc.v2, tc.single, group, err, tc.group, tc.err)
		}
	}
}

// A container's cgroup gets memory.oom.group=1 when the node kills whole
// containers, beside what else it writes; none otherwise.
func TestContainerOOMGroup(t *testing.T) {
	pod := podWith(req(resList("100m", "64Mi"), resList("", "64Mi")))
	c := &pod.Spec.Containers[0]
	r := &Runtime{cfg: Config{OOMKillGroup: true, Node: fakeCapacity{}}}
	if got := r.containerResources(pod, c).Unified; got["memory.oom.group"] != "1" {
		t.Errorf("unified %v, want memory.oom.group=1", got)
	}
	r.cfg.OOMKillGroup = false
	if got := r.containerResources(pod, c).Unified; got["memory.oom.group"] != "" {
		t.Errorf("unified %v without the group kill", got)
	}
}

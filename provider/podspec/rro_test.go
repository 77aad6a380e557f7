package podspec

import (
	"maps"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's resolveRecursiveReadOnly: its errors word for word, and
// IfPossible falling back to a plain read-only mount.
func TestResolveRecursiveReadOnly(t *testing.T) {
	mode := func(m v1.RecursiveReadOnlyMode) *v1.RecursiveReadOnlyMode { return &m }
	for _, c := range []struct {
		name      string
		m         v1.VolumeMount
		supported bool
		want      bool
		err       string
	}{
		{"unset", v1.VolumeMount{Name: "v", ReadOnly: true}, true, false, ""},
		{"disabled", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyDisabled)}, true, false, ""},
		{"enabled", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, true, true, ""},
		{"enabled unsupported", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, false, false,
			`volume "v" requested recursive read-only mode, but it is not supported by the runtime`},
		{"if possible", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, true, true, ""},
		{"if possible unsupported", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, false, false, ""},
		{"not read-only", v1.VolumeMount{Name: "v", RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, true, false,
			`volume "v" requested recursive read-only mode, but it is not read-only`},
		{"propagation", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled),
			MountPropagation: ptr.To(v1.MountPropagationHostToContainer)}, true, false,
			`volume "v" requested recursive read-only mode, but it is not compatible with propagation "HostToContainer"`},
		{"propagation none", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled),
			MountPropagation: ptr.To(v1.MountPropagationNone)}, true, true, ""},
		{"unknown", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode("Sometimes")}, true, false,
			`unknown recursive read-only mode "Sometimes"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolveRecursiveReadOnly(c.m, c.supported)
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// supplementalGroupsPolicy reaches the runtime as Strict or not; a policy
// the kubelet does not know is its error.
func TestSupplementalGroupsPolicy(t *testing.T) {
	r := &Runtime{}
	for _, c := range []struct {
		policy *v1.SupplementalGroupsPolicy
		strict bool
		err    string
	}{
		{nil, false, ""},
		{ptr.To(v1.SupplementalGroupsPolicyMerge), false, ""},
		{ptr.To(v1.SupplementalGroupsPolicyStrict), true, ""},
		{ptr.To(v1.SupplementalGroupsPolicy("Loose")), false, "unsupported supplementalGroupsPolicy: Loose"},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{
			SupplementalGroups: []int64{60000}, FSGroup: ptr.To(int64(3000)), SupplementalGroupsPolicy: c.policy}}}
		sec, err := r.containerSecurity(pod, &v1.Container{Name: "c"}, "")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("%v: error %v, want %q", c.policy, err, c.err)
			}
			continue
		}
		if err != nil || sec.StrictGroups != c.strict {
			t.Fatalf("%v: strict %v, %v", c.policy, sec.StrictGroups, err)
		}
		if len(sec.SupplementalGroups) != 2 || sec.SupplementalGroups[0] != 60000 || sec.SupplementalGroups[1] != 3000 {
			t.Fatalf("groups %v: the pod's and its fsGroup", sec.SupplementalGroups)
		}
	}
}

func TestContainerUser(t *testing.T) {
	if containerUser(nil) != nil {
		t.Fatal("a user from nothing")
	}
	u := containerUser(&runtime.User{UID: 1000, GID: 1000, SupplementalGroups: []uint32{1000, 60000}})
	if u.Linux == nil || u.Linux.UID != 1000 || u.Linux.GID != 1000 || len(u.Linux.SupplementalGroups) != 2 || u.Linux.SupplementalGroups[1] != 60000 {
		t.Fatalf("%+v", u.Linux)
	}
}

// A pod with a network of its own gets containerd's unprivileged ports and
// ICMP sysctls unless it sets them; not on the host's network, and no ICMP
// range in a user namespace.
func TestUnprivilegedNetSysctls(t *testing.T) {
	r := &Runtime{}
	for _, c := range []struct {
		name string
		spec v1.PodSpec
		want map[string]string
	}{
		{"pod network", v1.PodSpec{}, map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ping_group_range": "0 2147483647"}},
		{"own value kept", v1.PodSpec{SecurityContext: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "1024"}}}},
			map[string]string{"net.ipv4.ip_unprivileged_port_start": "1024", "net.ipv4.ping_group_range": "0 2147483647"}},
		{"user namespace", v1.PodSpec{HostUsers: ptr.To(false)}, map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}},
		{"host network", v1.PodSpec{HostNetwork: true}, nil},
	} {
		sec, err := r.containerSecurity(&v1.Pod{Spec: c.spec}, &v1.Container{Name: "c"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(sec.Sysctls, c.want) {
			t.Errorf("%s: sysctls %v, want %v", c.name, sec.Sysctls, c.want)
		}
	}
}

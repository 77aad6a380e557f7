package runtime

import (
	"reflect"
	"strings"
	"testing"
)

// A reserved cgroup's name as the kubelet's cgroup manager reads it in the
// driver's form.
func TestParseDriverName(t *testing.T) {
	fs := &Cgroups{}
	sd := &Cgroups{systemd: true}
	for _, tc := range []struct {
		c    *Cgroups
		in   string
		want CgroupName
		path string
	}{
		{fs, "/system.slice", CgroupName{"system.slice"}, "/system.slice"},
		{fs, "/kube/reserved", CgroupName{"kube", "reserved"}, "/kube/reserved"},
		{sd, "system.slice", CgroupName{"system"}, "/system.slice"},
		{sd, "/kube.slice", CgroupName{"kube"}, "/kube.slice"},
		{sd, "kube-reserved.slice", CgroupName{"kube", "reserved"}, "/kube.slice/kube-reserved.slice"},
		{sd, "my_app.slice", CgroupName{"my-app"}, "/my_app.slice"},
	} {
		got := tc.c.ParseDriverName(tc.in)
		if !reflect.DeepEqual(got, tc.want) || tc.c.name(got) != tc.path {
			t.Errorf("systemd %v, %q: %v (%s), want %v (%s)", tc.c.systemd, tc.in, got, tc.c.name(got), tc.want, tc.path)
		}
	}
}

// A cgroup that does not exist fails the kubelet's Validate with its
// message.
func TestValidateMissingCgroup(t *testing.T) {
	v2 := CgroupV2()
	c := &Cgroups{v2: v2}
	err := c.Validate(CgroupName{"hostlet-test-no-such-cgroup"})
	want := `cgroup ["hostlet-test-no-such-cgroup"] has some missing paths: `
	if v2 {
		want = `could not read controllers for cgroup ["hostlet-test-no-such-cgroup"]`
	}
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Validate of a missing cgroup: %v, want %q", err, want)
	}
	if err := c.Validate(CgroupName{}); err != nil {
		t.Errorf("the root: %v", err)
	}
}

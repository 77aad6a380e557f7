package runtime

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"5.12.0": true, "5.11.22-generic": false, "6.8.0-45-generic": true, "4.19.0": false,
		"5.12-rc1": true, "6.18.44-fc-v669": true, "": false, "garbage": false, "5.x": false,
	} {
		if got := kernelAtLeast(rel, 5, 12); got != want {
			t.Errorf("kernelAtLeast(%q, 5.12) = %v, want %v", rel, got, want)
		}
	}
}

// CRI's refusals: a recursive read-only mount that is writable, or on a
// handler without the feature.
func TestCheckRecursiveReadOnly(t *testing.T) {
	able := &RuntimeHandler{RecursiveReadOnlyMounts: true}
	unable := &RuntimeHandler{}
	ok := []Mount{{HostPath: "/a", ReadOnly: true, RecursiveReadOnly: true}, {HostPath: "/b"}}
	if err := checkRecursiveReadOnly(ok, able); err != nil {
		t.Fatal(err)
	}
	if err := checkRecursiveReadOnly(ok, unable); err == nil || !strings.Contains(err.Error(), "does not support recursive read-only mounts") {
		t.Fatalf("unable handler: %v", err)
	}
	if err := checkRecursiveReadOnly([]Mount{{HostPath: "/a", RecursiveReadOnly: true}}, able); err == nil || !strings.Contains(err.Error(), "conflicts with RW mount") {
		t.Fatalf("rw mount: %v", err)
	}
	if err := checkRecursiveReadOnly([]Mount{{HostPath: "/b", ReadOnly: true}}, unable); err != nil {
		t.Fatalf("plain read-only mount on an unable handler: %v", err)
	}
}

func testSpec(t *testing.T, cfg ContainerConfig) *oci.Spec {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ctr := &containers.Container{ID: "c"}
	spec, err := oci.GenerateSpec(ctx, nil, ctr)
	if err != nil {
		t.Fatal(err)
	}
	// Without the image config (it needs a client): the rest as made.
	for _, opt := range specFor(cfg, []string{"sh"}, "", true)[1:] {
		if err := opt(ctx, nil, ctr, spec); err != nil {
			t.Fatal(err)
		}
	}
	return spec
}

// The mount option runc makes recursive read-only mounts for, in place of
// "ro", as CRI passes it.
func TestRecursiveReadOnlyMountOption(t *testing.T) {
	sb := &Sandbox{UID: "u", Namespace: "ns", Name: "p", Dir: t.TempDir(), NetNSPath: "/run/netns/x"}
	spec := testSpec(t, ContainerConfig{Sandbox: sb, Name: "c", Image: &Image{}, Resources: Resources{CPUShares: 2},
		Mounts: []Mount{
			{HostPath: "/h/rro", ContainerPath: "/rro", ReadOnly: true, RecursiveReadOnly: true},
			{HostPath: "/h/ro", ContainerPath: "/ro", ReadOnly: true},
			{HostPath: "/h/rw", ContainerPath: "/rw"},
		}})
	want := map[string][]string{
		"/rro": {"rbind", "rprivate", "rro"},
		"/ro":  {"rbind", "rprivate", "ro"},
		"/rw":  {"rbind", "rprivate", "rw"},
	}
	for _, m := range spec.Mounts {
		if w, ok := want[m.Destination]; ok {
			if !slices.Equal(m.Options, w) {
				t.Errorf("%s: options %v, want %v", m.Destination, m.Options, w)
			}
			delete(want, m.Destination)
		}
	}
	if len(want) > 0 {
		t.Fatalf("mounts missing: %v", want)
	}
}

// supplementalGroupsPolicy: Strict gives the gid and the pod's groups,
// sorted (CRI's order), whatever the image gave the user; Merge keeps what
// the image's /etc/group gave and adds the pod's.
func TestStrictSupplementalGroups(t *testing.T) {
	uid, gid := int64(1000), int64(1000)
	for _, c := range []struct {
		name string
		sec  Security
		// image: the groups WithImageConfig left (the image's /etc/group)
		image []uint32
		want  []uint32
	}{
		{"strict", Security{RunAsUser: &uid, RunAsGroup: &gid, SupplementalGroups: []int64{60000, 3000}, StrictGroups: true},
			[]uint32{1000, 50000}, []uint32{1000, 3000, 60000}},
		{"strict no groups", Security{RunAsUser: &uid, RunAsGroup: &gid, StrictGroups: true}, []uint32{1000, 50000}, []uint32{1000}},
		{"strict gid among groups", Security{RunAsUser: &uid, RunAsGroup: &gid, SupplementalGroups: []int64{1000, 5}, StrictGroups: true},
			nil, []uint32{5, 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := namespaces.WithNamespace(context.Background(), "test")
			ctr := &containers.Container{ID: "c"}
			spec, err := oci.GenerateSpec(ctx, nil, ctr)
			if err != nil {
				t.Fatal(err)
			}
			spec.Process.User.AdditionalGids = c.image
			for _, opt := range securityOpts(c.sec, false) {
				if err := opt(ctx, nil, ctr, spec); err != nil {
					t.Fatal(err)
				}
			}
			if got := spec.Process.User.AdditionalGids; !slices.Equal(got, c.want) {
				t.Fatalf("groups %v, want %v", got, c.want)
			}
		})
	}
}

// The user recorded on a container reads back as the spec had it; a spec
// of an older hostlet's container (no label) is read itself.
func TestUserLabel(t *testing.T) {
	for _, u := range []User{{UID: 1000, GID: 1000, SupplementalGroups: []uint32{1000, 60000}}, {}} {
		got := parseUser(formatUser(u))
		if got == nil || got.UID != u.UID || got.GID != u.GID || !slices.Equal(got.SupplementalGroups, u.SupplementalGroups) {
			t.Fatalf("%+v read back as %+v", u, got)
		}
	}
	for _, bad := range []string{"", "1:2", "x:1:", "1:2:a"} {
		if parseUser(bad) != nil {
			t.Errorf("%q parsed", bad)
		}
	}
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ctr := &containers.Container{ID: "c"}
	spec, err := oci.GenerateSpec(ctx, nil, ctr, oci.WithUIDGID(7, 8))
	if err != nil {
		t.Fatal(err)
	}
	if ctr.Spec, err = typeurl.MarshalAny(spec); err != nil {
		t.Fatal(err)
	}
	if err := withUserLabel(ctx, nil, ctr); err != nil {
		t.Fatal(err)
	}
	st := statusFromInfo(*ctr, "")
	if st.User == nil || st.User.UID != 7 || st.User.GID != 8 || !slices.Equal(st.User.SupplementalGroups, []uint32{8}) {
		t.Fatalf("user from label %q: %+v", ctr.Labels[labelUser], st.User)
	}
	delete(ctr.Labels, labelUser)
	if st := statusFromInfo(*ctr, ""); st.User == nil || st.User.UID != 7 {
		t.Fatalf("user from spec: %+v", st.User)
	}
}

// A handler's recursive read-only feature is what containerd's CRI found.
func TestParseCRIHandlersRecursiveReadOnly(t *testing.T) {
	table, err := ParseCRIHandlers(criTestConfig(t), criFeatures, true)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"": true, "runc": true, "crun": false} {
		if got := table[name].RecursiveReadOnlyMounts; got != want {
			t.Errorf("%q: recursive read-only %v, want %v", name, got, want)
		}
	}
}

// Merged groups (the Merge policy) come in ascending order without
// repeats, as containerd's CRI merges them (mergeGids): the image's groups
// of the user, its gid, the pod's fsGroup and supplementalGroups alike.
func TestExtraGIDsSorted(t *testing.T) {
	spec := &oci.Spec{Process: &specs.Process{User: specs.User{GID: 3000, AdditionalGids: []uint32{3000, 50000}}}}
	if err := withExtraGIDs([]int64{2000, 4000, 50000})(context.Background(), nil, &containers.Container{}, spec); err != nil {
		t.Fatal(err)
	}
	if got, want := spec.Process.User.AdditionalGids, []uint32{2000, 3000, 4000, 50000}; !slices.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A container gets its own cgroup namespace where CRI gives it one: on a
// cgroup v2 host, unless privileged (found on a Debian 12 VM: containers
// saw the host's whole hierarchy at /sys/fs/cgroup).
func TestCgroupNamespace(t *testing.T) {
	for _, c := range []struct {
		name              string
		v2, privileged    bool
		want, cgroupMntRO bool
	}{
		{"v1", false, false, false, true},
		{"v1 privileged", false, true, false, false},
		{"v2", true, false, true, true},
		{"v2 privileged", true, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := &Sandbox{UID: "u", Namespace: "ns", Name: "p", Dir: t.TempDir(), NetNSPath: "/run/netns/x"}
			cfg := ContainerConfig{Sandbox: sb, Name: "c", Image: &Image{}, Security: Security{Privileged: c.privileged},
				Resources: Resources{CPUShares: 2}}
			ctx := namespaces.WithNamespace(context.Background(), "test")
			ctr := &containers.Container{ID: "c"}
			spec, err := oci.GenerateSpec(ctx, nil, ctr)
			if err != nil {
				t.Fatal(err)
			}
			for _, opt := range specFor(cfg, []string{"sh"}, "", c.v2)[1:] {
				if err := opt(ctx, nil, ctr, spec); err != nil {
					t.Fatal(err)
				}
			}
			got := slices.ContainsFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
				return ns.Type == specs.CgroupNamespace && ns.Path == ""
			})
			if got != c.want {
				t.Fatalf("cgroup namespace: %v, want %v (%v)", got, c.want, spec.Linux.Namespaces)
			}
			i := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == "/sys/fs/cgroup" })
			if i < 0 || slices.Contains(spec.Mounts[i].Options, "ro") != c.cgroupMntRO {
				t.Fatalf("/sys/fs/cgroup mount: %+v", spec.Mounts)
			}
		})
	}
}

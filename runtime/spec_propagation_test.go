package runtime

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Each mount's propagation becomes its bind option, and the container's
// root propagation is what runc needs for it, as CRI sets them: rshared
// for any Bidirectional mount, else rslave for any HostToContainer one,
// else runc's default. A host path on a mount that cannot propagate is
// refused with CRI's message.
func TestMountPropagation(t *testing.T) {
	mountinfo := map[string]mount.Info{
		"/shared":  {Mountpoint: "/shared", Optional: "shared:7"},
		"/slave":   {Mountpoint: "/slave", Optional: "master:7"},
		"/both":    {Mountpoint: "/both", Optional: "shared:8 master:7"},
		"/private": {Mountpoint: "/"},
	}
	lookup := func(p string) (mount.Info, error) {
		if i, ok := mountinfo[p]; ok {
			return i, nil
		}
		return mount.Info{}, errors.New("no mount")
	}
	for _, c := range []struct {
		name     string
		mounts   []Mount
		options  []string // each mount's propagation option
		rootfs   string
		errorMsg string
	}{
		{name: "private", mounts: []Mount{{HostPath: "/private", ContainerPath: "/a"}},
			options: []string{"rprivate"}},
		{name: "host to container on a slave", mounts: []Mount{{HostPath: "/slave", ContainerPath: "/a", Propagation: PropagationHostToContainer}},
			options: []string{"rslave"}, rootfs: "rslave"},
		{name: "bidirectional after host to container", mounts: []Mount{
			{HostPath: "/shared", ContainerPath: "/a", Propagation: PropagationHostToContainer},
			{HostPath: "/both", ContainerPath: "/b", Propagation: PropagationBidirectional},
			{HostPath: "/slave", ContainerPath: "/c", Propagation: PropagationHostToContainer},
			{HostPath: "/private", ContainerPath: "/d"},
		}, options: []string{"rslave", "rshared", "rslave", "rprivate"}, rootfs: "rshared"},
		{name: "bidirectional on a slave", mounts: []Mount{{HostPath: "/slave", ContainerPath: "/a", Propagation: PropagationBidirectional}},
			errorMsg: `path "/slave" is mounted on "/slave" but it is not a shared mount`},
		{name: "host to container on a private mount", mounts: []Mount{{HostPath: "/private", ContainerPath: "/a", Propagation: PropagationHostToContainer}},
			errorMsg: `path "/private" is mounted on "/" but it is not a shared or slave mount`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := &Sandbox{UID: "u", Namespace: "ns", Name: "p", Dir: t.TempDir(), NetNSPath: "/run/netns/x"}
			cfg := ContainerConfig{Sandbox: sb, Name: "c", Image: &Image{}, Mounts: c.mounts, Resources: Resources{CPUShares: 2}}
			ctx := namespaces.WithNamespace(context.Background(), "test")
			ctr := &containers.Container{ID: "c"}
			spec, err := oci.GenerateSpec(ctx, nil, ctr)
			if err != nil {
				t.Fatal(err)
			}
			opts := specFor(cfg, []string{"sh"}, "", true)
			// The last option checks propagation (with the host's mounts);
			// the test's stands in for it.
			opts = append(opts[1:len(opts)-1], withPropagation(c.mounts, lookup))
			for _, opt := range opts {
				if err = opt(ctx, nil, ctr, spec); err != nil {
					break
				}
			}
			if c.errorMsg != "" {
				if err == nil || err.Error() != c.errorMsg {
					t.Fatalf("error %v, want %q", err, c.errorMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if spec.Linux.RootfsPropagation != c.rootfs {
				t.Errorf("rootfsPropagation %q, want %q", spec.Linux.RootfsPropagation, c.rootfs)
			}
			for i, m := range c.mounts {
				j := slices.IndexFunc(spec.Mounts, func(s specs.Mount) bool { return s.Destination == m.ContainerPath })
				if j < 0 {
					t.Fatalf("no mount at %s", m.ContainerPath)
				}
				got := spec.Mounts[j].Options
				if want := c.options[i]; !slices.Contains(got, want) || slices.Contains(got, "rprivate") && want != "rprivate" {
					t.Errorf("mount at %s: options %v, want %s", m.ContainerPath, got, want)
				}
			}
		})
	}
}

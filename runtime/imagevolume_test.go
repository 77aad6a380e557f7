package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A view's mounts are made read-only whatever the snapshotter gave: a
// one-layer view is a bind of the layer itself.
func TestImageVolumeReadOnly(t *testing.T) {
	in := []mount.Mount{
		{Type: "bind", Source: "/layer", Options: []string{"rbind", "rw"}},
		{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=/a:/b"}},
		{Type: "bind", Source: "/l", Options: []string{"ro", "rbind"}},
	}
	got := readOnly(in)
	want := [][]string{{"rbind", "ro"}, {"lowerdir=/a:/b", "ro"}, {"ro", "rbind"}}
	for i := range got {
		if !slices.Equal(got[i].Options, want[i]) {
			t.Errorf("mount %d options %q, want %q", i, got[i].Options, want[i])
		}
	}
	if in[0].Options[1] != "rw" {
		t.Error("the snapshotter's mounts were changed in place")
	}
}

// One snapshot per pod, volume and image: the same after a restart, a new
// one for a new image.
func TestImageVolumeKey(t *testing.T) {
	a := imageVolumeKey("uid1", "vol", "d1")
	if a != "hostlet-image-volume/uid1/vol/d1" || a == imageVolumeKey("uid1", "vol", "d2") || a == imageVolumeKey("uid2", "vol", "d1") {
		t.Errorf("keys %q", a)
	}
}

// In a pod with a user namespace, volumes are idmapped binds, but an image
// volume, whose layers are mounted with the pod's mapping already, is not:
// an overlay cannot be idmapped again (runc: "failed to set
// MOUNT_ATTR_IDMAP ... invalid argument", seen here).
func TestImageVolumeBindNotIDMapped(t *testing.T) {
	m := IDMap{HostID: 65536, Size: 65536}
	sb := &Sandbox{UID: "u", Namespace: "ns", Name: "p", Dir: t.TempDir(), NetNSPath: "/run/netns/x",
		UserNSPath: "/pods/x/user", IDMap: &m}
	cfg := ContainerConfig{Sandbox: sb, Name: "c", Image: &Image{}, Mounts: []Mount{
		{HostPath: "/data", ContainerPath: "/data"},
		{HostPath: "/img", ContainerPath: "/img", ReadOnly: true, IDMapped: true},
	}}
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ctr := &containers.Container{ID: "c"}
	spec, err := oci.GenerateSpec(ctx, nil, ctr)
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range specFor(cfg, []string{"sh"}, "", true)[1:] {
		if err := opt(ctx, nil, ctr, spec); err != nil {
			t.Fatal(err)
		}
	}
	byDest := map[string]specs.Mount{}
	for _, mt := range spec.Mounts {
		byDest[mt.Destination] = mt
	}
	if d := byDest["/data"]; len(d.UIDMappings) != 1 || len(d.GIDMappings) != 1 {
		t.Errorf("volume bind not idmapped: %+v", d)
	}
	if i := byDest["/img"]; i.UIDMappings != nil || i.GIDMappings != nil || !slices.Contains(i.Options, "ro") {
		t.Errorf("image volume bind: %+v", i)
	}
}

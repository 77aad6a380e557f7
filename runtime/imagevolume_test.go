package runtime

import (
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
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

package node

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/hostlet/hostlet/runtime"
)

// The kubelet's selection: the largest first (the larger ID among equal
// sizes), nodeStatusMaxImages of them (-1 all, 0 none), repo digests then
// tags, at most 5 names.
func TestNodeImages(t *testing.T) {
	var imgs []runtime.StoredImage
	for i := 0; i < 60; i++ {
		imgs = append(imgs, runtime.StoredImage{
			ID: fmt.Sprintf("sha256:%064d", i), Size: int64(1000 + i%30),
			Names: []string{fmt.Sprintf("reg.io/img%d:v1", i)},
		})
	}
	got := NodeImages(imgs, DefaultMaxImages)
	if len(got) != 50 {
		t.Fatalf("%d images, want 50", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].SizeBytes > got[i-1].SizeBytes {
			t.Fatalf("not sorted by size at %d: %d > %d", i, got[i].SizeBytes, got[i-1].SizeBytes)
		}
	}
	// Sizes 1029 (img29, img59) first, the larger ID first.
	want0 := []string{"reg.io/img59@sha256:" + fmt.Sprintf("%064d", 59), "reg.io/img59:v1"}
	if !reflect.DeepEqual(got[0].Names, want0) || got[0].SizeBytes != 1029 || got[1].Names[1] != "reg.io/img29:v1" {
		t.Errorf("first %+v, second %+v", got[0], got[1])
	}
	// The smallest 10 (sizes 1000-1004, two each) are left out.
	for _, ci := range got {
		if ci.SizeBytes < 1005 {
			t.Errorf("small image %v listed", ci)
		}
	}
	if n := len(NodeImages(imgs, -1)); n != 60 {
		t.Errorf("-1: %d images, want 60", n)
	}
	if n := len(NodeImages(imgs, 0)); n != 0 {
		t.Errorf("0: %d images", n)
	}

	many := runtime.StoredImage{ID: "sha256:" + fmt.Sprintf("%064d", 7), Size: 5, Names: []string{
		"docker.io/library/busybox:latest", "busybox:1.36", "reg.io/a:1", "reg.io/a:2", "reg.io/b@sha256:" + fmt.Sprintf("%064d", 8),
		"sha256:" + fmt.Sprintf("%064d", 9),
	}}
	names := NodeImages([]runtime.StoredImage{many}, 50)[0].Names
	want := []string{
		"docker.io/library/busybox@sha256:" + fmt.Sprintf("%064d", 7),
		"reg.io/a@sha256:" + fmt.Sprintf("%064d", 7),
		"reg.io/b@sha256:" + fmt.Sprintf("%064d", 8),
		"docker.io/library/busybox:1.36",
		"docker.io/library/busybox:latest",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %v,\nwant %v", names, want)
	}
}

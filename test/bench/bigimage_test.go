package main

import (
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
)

// The big image is the same every build (its digests), gzip does not
// shrink its data, and its eStargz form carries the TOC digest.
func TestBigImage(t *testing.T) {
	spec := bigImageSpec{total: 3 << 20, perLayer: 1 << 20, perFile: 256 << 10, idle: []byte("#!idle")}
	build := func(stargz bool) *builtImage {
		t.Helper()
		b, err := buildBigImage(spec, t.TempDir(), stargz)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := build(false), build(false)
	if len(a.layers) != 4 {
		t.Fatalf("%d layers, want the idle one and 3 of data", len(a.layers))
	}
	for i := range a.layers {
		if a.layers[i] != b.layers[i] {
			t.Errorf("layer %d: %s, then %s", i, a.layers[i], b.layers[i])
		}
	}
	if a.size < spec.total {
		t.Errorf("compressed %d bytes, less than the %d bytes of data", a.size, spec.total)
	}
	s := build(true)
	m, err := s.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		if l.Annotations[estargz.TOCJSONDigestAnnotation] == "" {
			t.Errorf("eStargz layer %d: no TOC digest annotation", i)
		}
	}
	if s.size < spec.total {
		t.Errorf("eStargz: %d bytes, less than the data", s.size)
	}
	cf, err := s.img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Config.Entrypoint[0] != "/idle" || len(cf.RootFS.DiffIDs) != 4 {
		t.Errorf("config: %s/%s %v, %d diff IDs", cf.OS, cf.Architecture, cf.Config.Entrypoint, len(cf.RootFS.DiffIDs))
	}
}

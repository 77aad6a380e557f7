package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// The DNS specs' probe images are built, both with dig and getent on PATH.
func TestDNSProbeImages(t *testing.T) {
	got := wantedImages([]string{
		"registry.k8s.io/e2e-test-images/agnhost:2.59",
		"registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7",
		"registry.k8s.io/e2e-test-images/volume/nfs:1.4",
	})
	want := map[string]imageKind{
		"registry.k8s.io/e2e-test-images/agnhost:2.59":        kindAgnhost,
		"registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7": kindDNSUtils,
	}
	if len(got) != len(want) {
		t.Fatalf("wantedImages = %v; want %v", got, want)
	}
	for ref, k := range want {
		if got[ref] != k {
			t.Errorf("%s: kind %q, want %q", ref, got[ref], k)
		}
	}
	in := imageInputs{dig: []byte("dig"), getent: []byte("getent")}
	for _, k := range []imageKind{kindAgnhost, kindDNSUtils} {
		files := map[string]string{}
		for _, l := range recipeFor(k, in).layers {
			for _, e := range l {
				files[e.name] = string(e.data)
			}
		}
		for _, tool := range []string{"dig", "getent"} {
			if files["usr/bin/"+tool] != tool {
				t.Errorf("%s image: no usr/bin/%s", k, tool)
			}
		}
		if files["bin/bash"] == "" {
			t.Errorf("%s image: no bin/bash", k)
		}
	}
}

// -full builds the aggregator spec's images; the one-node selection does
// not (wantedImages leaves them out).
func TestFullImages(t *testing.T) {
	list := []string{
		"registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2",
		"registry.k8s.io/etcd:3.6.6-0",
		"registry.k8s.io/e2e-test-images/agnhost:2.59",
		"registry.k8s.io/e2e-test-images/kitten:1.7",
	}
	if got := wantedImages(list); len(got) != 1 {
		t.Errorf("wantedImages = %v, want agnhost only", got)
	}
	got := wantedFullImages(list)
	if len(got) != 3 || got[list[0]] != kindSampleAPIServer || got[list[1]] != kindEtcd || got[list[3]] != kindKitten {
		t.Fatalf("wantedFullImages = %v", got)
	}
	in := imageInputs{sampleAPIServer: []byte("sa"), etcd: []byte("etcd"),
		updateDemo: map[imageKind][]namedFile{kindKitten: {{"data.json", []byte("{}")}}}}
	for kind, want := range map[imageKind]string{kindSampleAPIServer: "sample-apiserver", kindEtcd: "usr/local/bin/etcd", kindKitten: "data.json"} {
		r := recipeFor(kind, in)
		last := r.layers[len(r.layers)-1]
		if len(last) != 1 || last[0].name != want || len(last[0].data) == 0 {
			t.Errorf("%s image: top layer %+v, want %s", kind, last, want)
		}
	}
	if ep := recipeFor(kindSampleAPIServer, in).config.Entrypoint; len(ep) != 1 || ep[0] != "/sample-apiserver" {
		t.Errorf("sample-apiserver entrypoint %q", ep)
	}
}

// A run removes the older archives of the kinds it built, not those of
// kinds only another selection (-full's) wants.
func TestOutdatedArchives(t *testing.T) {
	keep := map[string]bool{"/c/agnhost-new.tar": true, "/c/jessie-dnsutils-new.tar": true}
	built := map[imageKind][]string{kindAgnhost: nil, kindDNSUtils: nil}
	got := outdated([]string{"/c/agnhost-new.tar", "/c/agnhost-old.tar", "/c/jessie-dnsutils-new.tar",
		"/c/jessie-dnsutils-old.tar", "/c/etcd-abc.tar", "/c/sample-apiserver-abc.tar", "/c/odd.tar"}, keep, built)
	if want := "/c/agnhost-old.tar /c/jessie-dnsutils-old.tar"; strings.Join(got, " ") != want {
		t.Errorf("outdated = %q, want %s", got, want)
	}
}

// renameApplet keeps busybox's applet table sorted and refuses a name it
// cannot place.
func TestRenameApplet(t *testing.T) {
	bin := []byte("ELF\x00dc\x00dd\x00deallocvt\x00more")
	got, err := renameApplet(bin, "dc", "dd", "de", "deallocvt")
	if err != nil || string(got) != "ELF\x00dc\x00de\x00deallocvt\x00more" {
		t.Fatalf("renameApplet = %q, %v", got, err)
	}
	if _, err := renameApplet(bin, "dc", "dd", "zz", "deallocvt"); err == nil {
		t.Error("a name out of the table's order was accepted")
	}
	if _, err := renameApplet(bin, "nameif", "nc", "nd", "netstat"); err == nil {
		t.Error("a missing applet was accepted")
	}
}

// agnhost's fake registry serves pause:testing as upstream's does: the tag
// file names the manifest's digest, and the manifest and every blob it
// names are there under their digests, as fake-registry-server reads them.
func TestFakeRegistryLayer(t *testing.T) {
	in := imageInputs{pause: []byte("pause binary")}
	l, err := fakeRegistryLayer(in)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range l {
		if !e.dir {
			files[e.name] = e.data
		}
	}
	const dir = "var/registry/pause/"
	digest := strings.TrimSpace(string(files[dir+"manifests/testing"]))
	manifest, ok := files[dir+"manifests/"+digest]
	if !ok {
		t.Fatalf("no manifest %q; files %v", digest, slices.Collect(maps.Keys(files)))
	}
	sum := func(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }
	if sum(manifest) != digest {
		t.Errorf("manifest's digest %s, the tag names %s", sum(manifest), digest)
	}
	var m struct {
		MediaType string
		Config    struct{ Digest string }
		Layers    []struct{ Digest string }
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType == "" {
		t.Error("the manifest has no mediaType (the server's Content-Type)")
	}
	for _, d := range append([]string{m.Config.Digest}, func() (ds []string) {
		for _, l := range m.Layers {
			ds = append(ds, l.Digest)
		}
		return ds
	}()...) {
		b, ok := files[dir+"blobs/"+d]
		if !ok || sum(b) != d {
			t.Errorf("blob %s: there %v, its digest %s", d, ok, sum(b))
		}
	}
	if len(m.Layers) != 1 {
		t.Errorf("%d layers, want the pause stand-in's one", len(m.Layers))
	}
}

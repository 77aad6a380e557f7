package main

import "testing"

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

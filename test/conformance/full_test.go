package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestConformanceNames(t *testing.T) {
	all := []listedTest{
		{"a.go:1", "[sig-apps] Deployment should run [Conformance]"},
		{"b.go:2", "[sig-node] Pods should be fine [NodeConformance]"},
		{"c.go:3", "[sig-api-machinery] Webhook should mutate [Serial] [Conformance]"},
	}
	got := conformanceNames(all)
	want := []string{"[sig-api-machinery] Webhook should mutate [Serial] [Conformance]", "[sig-apps] Deployment should run [Conformance]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("conformanceNames = %q, want %q", got, want)
	}
}

func TestSummaryBySIG(t *testing.T) {
	s := summary{
		passed:  []result{{name: "[sig-apps] a"}, {name: "[sig-apps] b"}, {name: "[sig-node] c"}},
		failed:  []result{{name: "[sig-apps] d"}},
		skipped: []result{{name: "[sig-node] e"}},
		missing: []string{"no sig f"},
	}
	got := s.bySIG()
	want := map[string]sigCounts{"sig-apps": {passed: 2, failed: 1}, "sig-node": {passed: 1, skipped: 1}, "other": {missing: 1}}
	if len(got) != len(want) {
		t.Fatalf("bySIG = %v, want %v", got, want)
	}
	for sig, w := range want {
		if got[sig] == nil || *got[sig] != w {
			t.Errorf("%s: %+v, want %+v", sig, got[sig], w)
		}
	}
	var b strings.Builder
	s.printBySIG(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "sig-apps") || !strings.HasPrefix(lines[4], "total") ||
		strings.Join(strings.Fields(lines[4]), " ") != "total 6 3 1 1 1" {
		t.Errorf("printBySIG:\n%s", b.String())
	}
}

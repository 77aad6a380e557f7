package main

import (
	"slices"
	"testing"
)

func TestNodeConformanceNames(t *testing.T) {
	all := []string{
		"[sig-node] A [NodeConformance] runs",
		"[sig-node] B [Serial] [NodeConformance] one at a time",
		"[sig-node] C [Slow] [NodeConformance] one at a time",
		"[sig-node] D [Serial] [Disruptive] [NodeConformance] restarts the node's agent",
		"[sig-node] E [Feature:ImageVolume] outside the conformance set",
		"[sig-node] F [Serial] [Feature:OOMScoreAdj] outside it, one at a time",
		"[sig-node] G [Serial] [Disruptive] [Feature:X] never",
	}
	for _, c := range []struct {
		every            bool
		parallel, serial []string
	}{
		{false, all[:1], all[1:3]},
		{true, []string{all[0], all[4]}, []string{all[1], all[2], all[5]}},
	} {
		p, s := nodeConformanceNames(all, c.every)
		if !slices.Equal(p, c.parallel) || !slices.Equal(s, c.serial) {
			t.Errorf("every=%v: parallel %q serial %q, want %q and %q", c.every, p, s, c.parallel, c.serial)
		}
	}
}

package main

import (
	"strings"
	"testing"
)

func TestSplitNetwork(t *testing.T) {
	core, network := splitNetwork([]string{
		"[sig-node] Pods should run", "[sig-network] Services should serve", "[sig-storage] HostPath should give",
		"[sig-network] DNS should support configurable pod DNS nameservers [Conformance]",
	})
	if strings.Join(core, "|") != "[sig-node] Pods should run|[sig-storage] HostPath should give" {
		t.Errorf("core: %q", core)
	}
	if len(network) != 2 || !strings.HasPrefix(network[1], "[sig-network] DNS") {
		t.Errorf("network: %q", network)
	}
}

// The comparison counts both runs and sorts each difference by whose it
// is: only hostlet fails (hostlet's), only the kubelet fails, both fail
// (the environment's).
func TestPrintComparison(t *testing.T) {
	names := []string{"A", "B", "C", "D", "E"}
	hostlet := summarize([]result{
		{name: "A", state: "passed"}, {name: "B", state: "failed"}, {name: "C", state: "failed"},
		{name: "D", state: "passed"}, {name: "E", state: "passed"},
	}, names, nil)
	kubelet := summarize([]result{
		{name: "A", state: "passed"}, {name: "B", state: "passed"}, {name: "C", state: "failed"},
		{name: "D", state: "timedout"},
	}, names, nil)
	var b strings.Builder
	printComparison(&b, names, hostlet, kubelet)
	out := b.String()
	for _, want := range []string{
		"hostlet        3       2        0        0\n",
		"kubelet        2       2        0        1\n",
		"the kubelet passes, hostlet does not: hostlet's (1):\n  B (hostlet: failed)\n",
		"hostlet passes, the kubelet does not (2):\n  D (kubelet: failed)\n  E (kubelet: missing)\n",
		"both fail: the environment's or the test images' (1):\n  C\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// -full's comparison counts each SIG on both kinds of node, largest first.
func TestPrintSIGComparison(t *testing.T) {
	names := []string{"[sig-apps] a", "[sig-apps] b", "[sig-node] c"}
	hostlet := summarize([]result{
		{name: "[sig-apps] a", state: "passed"}, {name: "[sig-apps] b", state: "passed"}, {name: "[sig-node] c", state: "failed"},
	}, names, nil)
	kubelet := summarize([]result{
		{name: "[sig-apps] a", state: "passed"}, {name: "[sig-node] c", state: "passed"},
	}, names, nil)
	var b strings.Builder
	printSIGComparison(&b, hostlet, kubelet)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two SIGs:\n%s", b.String())
	}
	for i, want := range []string{"sig-apps 2 2/0 1/1", "sig-node 1 0/1 1/0"} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); got != want {
			t.Errorf("line %d: %q, want %q", i+1, got, want)
		}
	}
}

package main

import (
	"fmt"
	"io"
	"sort"
)

// outcomes maps each test to its result's result in one summary: passed, failed, skipped, or
// missing (not in the report).
func (s summary) outcomes() map[string]string {
	out := map[string]string{}
	for _, r := range s.passed {
		out[r.name] = "passed"
	}
	for _, r := range s.failed {
		out[r.name] = "failed"
	}
	for _, r := range s.skipped {
		out[r.name] = "skipped"
	}
	for _, n := range s.missing {
		out[n] = "missing"
	}
	return out
}

// printComparison prints hostlet's and the kubelet's counts side by side
// and every test whose outcome differs. A test the kubelet fails too is
// this environment's (or the test images'); one only hostlet fails is
// hostlet's.
func printComparison(w io.Writer, names []string, hostlet, kubelet summary) {
	h, k := hostlet.outcomes(), kubelet.outcomes()
	fmt.Fprintf(w, "\n==== hostlet vs kubelet (same selection, same setup) ====\n")
	fmt.Fprintf(w, "%-8s %7s %7s %8s %8s\n", "node", "passed", "failed", "skipped", "missing")
	for _, row := range []struct {
		name string
		s    summary
	}{{"hostlet", hostlet}, {"kubelet", kubelet}} {
		fmt.Fprintf(w, "%-8s %7d %7d %8d %8d\n", row.name, len(row.s.passed), len(row.s.failed), len(row.s.skipped), len(row.s.missing))
	}
	var hostletOnly, kubeletOnly, both, other []string
	for _, n := range names {
		switch hs, ks := h[n], k[n]; {
		case hs == ks && hs == "failed":
			both = append(both, n)
		case hs == ks:
		case ks == "passed" && hs != "passed":
			hostletOnly = append(hostletOnly, fmt.Sprintf("%s (hostlet: %s)", n, hs))
		case hs == "passed" && ks != "passed":
			kubeletOnly = append(kubeletOnly, fmt.Sprintf("%s (kubelet: %s)", n, ks))
		default:
			other = append(other, fmt.Sprintf("%s (hostlet: %s, kubelet: %s)", n, hs, ks))
		}
	}
	list := func(title string, l []string) {
		if len(l) == 0 {
			return
		}
		sort.Strings(l)
		fmt.Fprintf(w, "\n%s (%d):\n", title, len(l))
		for _, n := range l {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	list("the kubelet passes, hostlet does not: hostlet's", hostletOnly)
	list("hostlet passes, the kubelet does not", kubeletOnly)
	list("both fail: the environment's or the test images'", both)
	list("other differences", other)
}

// printSIGComparison prints each SIG's passed and failed (a failure being
// anything not passed: failed, skipped or missing) on hostlet and on the
// kubelet side by side, largest SIG first (-full's runs).
func printSIGComparison(w io.Writer, hostlet, kubelet summary) {
	h, k := hostlet.bySIG(), kubelet.bySIG()
	total := map[string]int{}
	for _, m := range []map[string]*sigCounts{h, k} {
		for sig, c := range m {
			if n := c.passed + c.failed + c.skipped + c.missing; n > total[sig] {
				total[sig] = n
			}
		}
	}
	sigs := make([]string, 0, len(total))
	for sig := range total {
		sigs = append(sigs, sig)
	}
	sort.Slice(sigs, func(i, j int) bool {
		if a, b := total[sigs[i]], total[sigs[j]]; a != b {
			return a > b
		}
		return sigs[i] < sigs[j]
	})
	fmt.Fprintf(w, "\n%-22s %6s %17s %17s\n", "SIG", "tests", "hostlet pass/not", "kubelet pass/not")
	cell := func(c *sigCounts) string {
		if c == nil {
			return "-"
		}
		return fmt.Sprintf("%d/%d", c.passed, c.failed+c.skipped+c.missing)
	}
	for _, sig := range sigs {
		fmt.Fprintf(w, "%-22s %6d %17s %17s\n", sig, total[sig], cell(h[sig]), cell(k[sig]))
	}
}

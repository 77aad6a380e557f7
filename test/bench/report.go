package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// row is one line of the comparison: a metric, its value on a node and how
// that value prints. better names a smaller value in the ratio's words
// ("faster", "lighter", "fewer"); empty: no ratio.
type row struct {
	metric string
	val    func(*nodeResult) float64
	cell   func(*nodeResult) string
	better string
}

// worse is the word for the other way round.
var worse = map[string]string{"faster": "slower", "lighter": "heavier", "fewer": "more"}

func durRow(metric string, d func(*nodeResult) time.Duration) row {
	return row{metric, func(r *nodeResult) float64 { return d(r).Seconds() }, func(r *nodeResult) string { return ms(d(r)) }, "faster"}
}

func memRow(metric string, b func(*nodeResult) int64) row {
	return row{metric, func(r *nodeResult) float64 { return float64(b(r)) }, func(r *nodeResult) string { return mib(b(r)) }, "lighter"}
}

func cpuRow(metric string, d func(*nodeResult) time.Duration) row {
	return row{metric, func(r *nodeResult) float64 { return d(r).Seconds() }, func(r *nodeResult) string { return cpu(d(r), r.window) }, "lighter"}
}

// cpuSpanRow is CPU time used over a burst (all rounds).
func cpuSpanRow(metric string, d func(*nodeResult) time.Duration) row {
	return row{metric, func(r *nodeResult) float64 { return d(r).Seconds() }, func(r *nodeResult) string { return fmt.Sprintf("%.2f s", d(r).Seconds()) }, "lighter"}
}

// busyRow is the share of the machine's CPUs busy over a span; neither
// more nor less is better, it says whether the span was CPU-bound.
func busyRow(metric string, u func(*nodeResult) cpuUse) row {
	return row{metric, func(r *nodeResult) float64 { return u(r).busy() }, func(r *nodeResult) string { return fmt.Sprintf("%.0f%%", 100*u(r).busy()) }, ""}
}

// forksRow is how many processes and threads the whole machine started
// over a span (the control plane's and the bench's are few; a pod's own
// process is one and its threads).
func forksRow(metric string, u func(*nodeResult) cpuUse) row {
	return countRow(metric, "fewer", func(r *nodeResult) int { return int(u(r).machine.forks) })
}

func countRow(metric, better string, n func(*nodeResult) int) row {
	return row{metric, func(r *nodeResult) float64 { return float64(n(r)) }, func(r *nodeResult) string { return fmt.Sprint(n(r)) }, better}
}

func ms(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// cpu is CPU time over a window, also as a share of one core.
func cpu(d, window time.Duration) string {
	return fmt.Sprintf("%.2f s (%.1f%% of a core)", d.Seconds(), 100*d.Seconds()/window.Seconds())
}

// ratio is a ÷ b and, in words, how much better or worse a is.
func ratio(a, b float64, better string) (string, string) {
	if better == "" || a <= 0 || b <= 0 {
		return "", ""
	}
	r := a / b
	switch {
	case r < 0.95:
		return fmt.Sprintf("%.2f", r), fmt.Sprintf("%.1f× %s", 1/r, better)
	case r > 1.05:
		return fmt.Sprintf("%.2f", r), fmt.Sprintf("%.1f× %s", r, worse[better])
	}
	return fmt.Sprintf("%.2f", r), "same"
}

func rows(c config) []row {
	n, e, m := c.pods, c.exits, c.probed
	var rounds string
	if c.rounds > 1 {
		rounds = fmt.Sprintf(", %d rounds", c.rounds)
	}
	burst := []row{
		durRow(fmt.Sprintf("burst of %d pods%s: create → Running, p50", n, rounds), func(r *nodeResult) time.Duration { return r.start.pct(50) }),
		durRow(fmt.Sprintf("burst of %d: create → Running, p95", n), func(r *nodeResult) time.Duration { return r.start.pct(95) }),
		durRow(fmt.Sprintf("burst of %d: all Running (slowest round)", n), func(r *nodeResult) time.Duration { return r.allRunning }),
		durRow(fmt.Sprintf("burst of %d: delete → gone, p50", n), func(r *nodeResult) time.Duration { return r.del.pct(50) }),
		durRow(fmt.Sprintf("burst of %d: delete → gone, p95", n), func(r *nodeResult) time.Duration { return r.del.pct(95) }),
		durRow(fmt.Sprintf("burst of %d: all gone (slowest round)", n), func(r *nodeResult) time.Duration { return r.allGone }),
		cpuSpanRow(fmt.Sprintf("burst of %d, start: CPU of the agent (and the CNI plugins it runs)", n), func(r *nodeResult) time.Duration { return r.startCPU.agent }),
		cpuSpanRow(fmt.Sprintf("burst of %d, start: CPU of containerd, shims, runc (CRI: and CNI)", n), func(r *nodeResult) time.Duration { return r.startCPU.runtime }),
		cpuSpanRow(fmt.Sprintf("burst of %d, start: CPU of the control plane (API server, etcd, scheduler, controller-manager)", n), func(r *nodeResult) time.Duration { return r.startCPU.controlPlane }),
		cpuSpanRow(fmt.Sprintf("burst of %d, start: CPU of the pods' cgroups (their processes and runc init; CRI: pause)", n), func(r *nodeResult) time.Duration { return r.startCPU.pods }),
		cpuSpanRow(fmt.Sprintf("burst of %d, start: CPU of the rest of the machine (kernel threads, the bench)", n), func(r *nodeResult) time.Duration { return r.startCPU.others() }),
		busyRow(fmt.Sprintf("burst of %d, start: the machine's CPUs busy", n), func(r *nodeResult) cpuUse { return r.startCPU }),
		forksRow(fmt.Sprintf("burst of %d, start: processes and threads started on the machine", n), func(r *nodeResult) cpuUse { return r.startCPU }),
		cpuSpanRow(fmt.Sprintf("burst of %d, delete: CPU of the agent", n), func(r *nodeResult) time.Duration { return r.delCPU.agent }),
		cpuSpanRow(fmt.Sprintf("burst of %d, delete: CPU of containerd, shims, runc", n), func(r *nodeResult) time.Duration { return r.delCPU.runtime }),
		forksRow(fmt.Sprintf("burst of %d, delete: processes and threads started on the machine", n), func(r *nodeResult) cpuUse { return r.delCPU }),
		memRow(fmt.Sprintf("RSS with %d idle pods: node agent", n), func(r *nodeResult) int64 { return r.idle.agent }),
		memRow(fmt.Sprintf("RSS with %d idle pods: its containerd", n), func(r *nodeResult) int64 { return r.idle.runtime }),
		row{fmt.Sprintf("RSS with %d idle pods: its shims (PSS, summed)", n), func(r *nodeResult) float64 { return float64(r.idle.shimsPSS) },
			func(r *nodeResult) string { return fmt.Sprintf("%s in %d", mib(r.idle.shimsPSS), r.idle.shims) }, "lighter"},
	}
	exit := []row{
		durRow(fmt.Sprintf("exit → API terminated, p50 (%d exits)", e), func(r *nodeResult) time.Duration { return r.exit.pct(50) }),
		durRow("exit → API terminated, p95", func(r *nodeResult) time.Duration { return r.exit.pct(95) }),
	}
	probed := []row{
		durRow(fmt.Sprintf("burst of %d probed pods: create → Ready, p50", m), func(r *nodeResult) time.Duration { return r.probedStart.pct(50) }),
		durRow(fmt.Sprintf("burst of %d probed pods: all Ready", m), func(r *nodeResult) time.Duration { return r.probedReady }),
		durRow(fmt.Sprintf("burst of %d probed pods: create → Running, p50", m), func(r *nodeResult) time.Duration { return r.probedRun.pct(50) }),
		durRow(fmt.Sprintf("burst of %d probed pods: all Running", m), func(r *nodeResult) time.Duration { return r.probedRunning }),
		durRow(fmt.Sprintf("burst of %d probed pods: one more Running every (p10 → p90 pace)", m), func(r *nodeResult) time.Duration { return r.probedRun.pace() }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, start: CPU of the agent", m), func(r *nodeResult) time.Duration { return r.probedStartCPU.agent }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, start: CPU of containerd, shims, runc", m), func(r *nodeResult) time.Duration { return r.probedStartCPU.runtime }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, start: CPU of the control plane", m), func(r *nodeResult) time.Duration { return r.probedStartCPU.controlPlane }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, start: CPU of the pods' cgroups", m), func(r *nodeResult) time.Duration { return r.probedStartCPU.pods }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, start: CPU of the rest of the machine", m), func(r *nodeResult) time.Duration { return r.probedStartCPU.others() }),
		busyRow(fmt.Sprintf("burst of %d probed, start: the machine's CPUs busy", m), func(r *nodeResult) cpuUse { return r.probedStartCPU }),
		forksRow(fmt.Sprintf("burst of %d probed, start: processes and threads started on the machine", m), func(r *nodeResult) cpuUse { return r.probedStartCPU }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, delete: CPU of the agent", m), func(r *nodeResult) time.Duration { return r.probedDelCPU.agent }),
		cpuSpanRow(fmt.Sprintf("burst of %d probed, delete: CPU of containerd, shims, runc", m), func(r *nodeResult) time.Duration { return r.probedDelCPU.runtime }),
		forksRow(fmt.Sprintf("burst of %d probed, delete: processes and threads started on the machine", m), func(r *nodeResult) cpuUse { return r.probedDelCPU }),
		cpuRow("steady: node agent CPU", func(r *nodeResult) time.Duration { return r.agent.cpu }),
		memRow("steady: node agent RSS, max", func(r *nodeResult) int64 { return r.agent.maxRSS }),
		cpuRow("steady: its containerd CPU", func(r *nodeResult) time.Duration { return r.runtime.cpu }),
		memRow("steady: its containerd RSS, max", func(r *nodeResult) int64 { return r.runtime.maxRSS }),
		cpuRow("steady: agent + containerd CPU", func(r *nodeResult) time.Duration { return r.agent.cpu + r.runtime.cpu }),
		memRow("steady: agent + containerd RSS", func(r *nodeResult) int64 { return r.agent.maxRSS + r.runtime.maxRSS }),
		countRow("steady: API writes by the node", "fewer", func(r *nodeResult) int { return r.steadyWrites }),
		countRow("steady: pods not Ready at the end", "", func(r *nodeResult) int { return r.notReadyAtEnd }),
		durRow(fmt.Sprintf("burst of %d probed pods: all gone", m), func(r *nodeResult) time.Duration { return r.probedGone }),
	}
	var out []row
	for _, sc := range []struct {
		name string
		rows []row
	}{{"burst", burst}, {"exit", exit}, {"probed", probed}, {"density", densityRows(c.density)}, {"join", joinRows(c.joins)}, {"images", imageRows(c)}, {"statefulset", stsRows(c)}} {
		if c.scenarios == nil || c.scenarios[sc.name] {
			out = append(out, sc.rows...)
		}
	}
	return append(out,
		durRow("whole node run: duration", func(r *nodeResult) time.Duration { return r.runTime }),
		row{"whole node run: agent CPU", func(r *nodeResult) float64 { return r.runAgentCPU.Seconds() },
			func(r *nodeResult) string { return fmt.Sprintf("%.2f s", r.runAgentCPU.Seconds()) }, "lighter"},
		countRow("whole node run: API writes", "fewer", func(r *nodeResult) int { return r.runWrites }),
	)
}

// table renders the comparison as markdown, one column per node and, with
// two nodes, the ratio first ÷ second in figures and words.
func table(c config, labels []string, res []*nodeResult) string {
	var b strings.Builder
	head := labels
	if len(res) == 2 {
		head = append(append([]string(nil), labels...), labels[0]+" ÷ "+labels[1], "")
	}
	fmt.Fprintf(&b, "| metric | %s |\n|---|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, rw := range rows(c) {
		cells := make([]string, len(res))
		for i, r := range res {
			cells[i] = rw.cell(r)
		}
		if len(res) == 2 {
			f, w := ratio(rw.val(res[0]), rw.val(res[1]), rw.better)
			cells = append(cells, f, w)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", rw.metric, strings.Join(cells, " | "))
	}
	b.WriteString(roundsTable(labels, res))
	b.WriteString(imagesTable(labels, res))
	fmt.Fprintf(&b, "\nAPI writes during the steady window, by verb and resource:\n\n| write | %s |\n|---|%s\n",
		strings.Join(labels, " | "), strings.Repeat("---|", len(labels)))
	keys := map[string]bool{}
	for _, r := range res {
		for k := range r.steadyWritesBy {
			keys[k] = true
		}
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		cells := make([]string, len(res))
		for i, r := range res {
			cells[i] = fmt.Sprint(r.steadyWritesBy[k])
		}
		fmt.Fprintf(&b, "| %s | %s |\n", k, strings.Join(cells, " | "))
	}
	return b.String()
}

// roundsTable counts, per burst and node, the pods expected, the pods that
// got Running (Ready for probed pods) and the pods gone after their delete.
func roundsTable(labels []string, res []*nodeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nPods per burst (expected / Running / gone after delete; a shortfall is a lost or stuck pod):\n\n| burst | %s |\n|---|%s\n",
		strings.Join(labels, " | "), strings.Repeat("---|", len(labels)))
	for i := range res[0].rounds {
		cells := make([]string, len(res))
		for j, r := range res {
			if i < len(r.rounds) {
				rc := r.rounds[i]
				cells[j] = fmt.Sprintf("%d / %d / %d", rc.expected, rc.reached, rc.gone)
				if rc.lost() > 0 {
					cells[j] += " LOST"
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", res[0].rounds[i].name, strings.Join(cells, " | "))
	}
	return b.String()
}

// lost is how many pods a node lost or left stuck over all bursts.
func (r *nodeResult) lost() int {
	n := 0
	for _, rc := range r.rounds {
		n += rc.lost()
	}
	return n
}

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// header is the markdown file's preamble: what ran, where, how.
func header(c config, env *benchEnv) string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf(`# hostlet vs the upstream kubelet

- run: %s, one local cluster, both nodes side by side, measured one after the other
- hostlet: %s (containerd API, harness containerd; pod network: %s; OCI runtime: %s); kubelet: %s (CRI containerd of its own, cgroupfs; a bridge conflist; OCI runtime: %s)
- machine: %d CPUs, kernel %s; scenarios: %s
- pods: %d busybox sleepers started and deleted at once, %d rounds reusing the names (RSS measured after the
  first round's pods were Running and idle for %v); %d exits (container PID 1 SIGKILLed from the host,
  latency to the watch event showing it terminated); %d testapp pods with an httpGet readiness probe every 1 s,
  measured over %v once all are Ready (CPU from /proc/<pid>/stat, RSS the max of 1 s VmRSS samples, API writes
  from the apiserver's audit log)
%s
`, time.Now().UTC().Format(time.RFC3339), env.hostletCommit, c.hostletNet, c.runtime, env.kubeletVersion, c.kubeletRuntime, runtime.NumCPU(),
		strings.TrimSpace(string(kernel)), scenarioList(c), c.pods, c.rounds, c.idle, c.exits, c.probed, c.window, extraHeader(c))
}

// scenarioList names the scenarios run, in scenarioNames' order.
func scenarioList(c config) string {
	var on []string
	for _, s := range scenarioNames {
		if c.scenarios[s] {
			on = append(on, s)
		}
	}
	return strings.Join(on, ", ")
}

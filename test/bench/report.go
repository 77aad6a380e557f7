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

// row is one line of the comparison: a metric and one cell per node.
type row struct {
	metric string
	cell   func(*nodeResult) string
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

func rows(c config) []row {
	n, e, m := c.pods, c.exits, c.probed
	return []row{
		{fmt.Sprintf("pod start, create → Running, p50 (%d pods at once)", n), func(r *nodeResult) string { return ms(r.start.pct(50)) }},
		{"pod start, create → Running, p95", func(r *nodeResult) string { return ms(r.start.pct(95)) }},
		{fmt.Sprintf("pod start, all %d Running", n), func(r *nodeResult) string { return ms(r.allRunning) }},
		{fmt.Sprintf("delete %d pods, delete → gone, p50", n), func(r *nodeResult) string { return ms(r.del.pct(50)) }},
		{"delete, delete → gone, p95", func(r *nodeResult) string { return ms(r.del.pct(95)) }},
		{fmt.Sprintf("delete, all %d gone", n), func(r *nodeResult) string { return ms(r.allGone) }},
		{fmt.Sprintf("exit → API terminated, p50 (%d exits)", e), func(r *nodeResult) string { return ms(r.exit.pct(50)) }},
		{"exit → API terminated, p95", func(r *nodeResult) string { return ms(r.exit.pct(95)) }},
		{fmt.Sprintf("%d probed pods at once, create → Ready, p50", m), func(r *nodeResult) string { return ms(r.probedStart.pct(50)) }},
		{fmt.Sprintf("%d probed pods, all Ready", m), func(r *nodeResult) string { return ms(r.probedReady) }},
		{"steady: node agent CPU", func(r *nodeResult) string { return cpu(r.agent.cpu, r.window) }},
		{"steady: node agent RSS, max", func(r *nodeResult) string { return mib(r.agent.maxRSS) }},
		{"steady: its containerd CPU", func(r *nodeResult) string { return cpu(r.runtime.cpu, r.window) }},
		{"steady: its containerd RSS, max", func(r *nodeResult) string { return mib(r.runtime.maxRSS) }},
		{"steady: agent + containerd CPU", func(r *nodeResult) string { return cpu(r.agent.cpu+r.runtime.cpu, r.window) }},
		{"steady: agent + containerd RSS", func(r *nodeResult) string { return mib(r.agent.maxRSS + r.runtime.maxRSS) }},
		{"steady: API writes by the node", func(r *nodeResult) string { return fmt.Sprint(r.steadyWrites) }},
		{"steady: pods not Ready at the end", func(r *nodeResult) string { return fmt.Sprint(r.notReadyAtEnd) }},
		{fmt.Sprintf("delete %d probed pods, all gone", m), func(r *nodeResult) string { return ms(r.probedGone) }},
		{"whole node run: duration", func(r *nodeResult) string { return ms(r.runTime) }},
		{"whole node run: agent CPU", func(r *nodeResult) string { return fmt.Sprintf("%.2f s", r.runAgentCPU.Seconds()) }},
		{"whole node run: API writes", func(r *nodeResult) string { return fmt.Sprint(r.runWrites) }},
	}
}

// table renders the comparison as markdown, one column per node.
func table(c config, labels []string, res []*nodeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| metric | %s |\n|---|%s\n", strings.Join(labels, " | "), strings.Repeat("---|", len(labels)))
	for _, rw := range rows(c) {
		cells := make([]string, len(res))
		for i, r := range res {
			cells[i] = rw.cell(r)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", rw.metric, strings.Join(cells, " | "))
	}
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
- hostlet: %s (containerd API, harness containerd); kubelet: %s (CRI containerd of its own, cgroupfs)
- machine: %d CPUs, kernel %s
- pods: %d busybox sleepers started and deleted at once; %d exits (container PID 1 SIGKILLed from the host,
  latency to the watch event showing it terminated); %d testapp pods with an httpGet readiness probe every 1 s,
  measured over %v once all are Ready (CPU from /proc/<pid>/stat, RSS the max of 1 s VmRSS samples, API writes
  from the apiserver's audit log)

`, time.Now().UTC().Format(time.RFC3339), env.hostletCommit, env.kubeletVersion, runtime.NumCPU(),
		strings.TrimSpace(string(kernel)), c.pods, c.exits, c.probed, c.window)
}

package main

import (
	"fmt"
	"strings"
	"time"
)

// point is the density point of n pods measured on r (zero if none).
func (r *nodeResult) point(n int) *densityPoint {
	if p := r.density[n]; p != nil {
		return p
	}
	return &densityPoint{pods: n}
}

// perPod is an amount per pod of a point (0 for no pods).
func perPod(v float64, pods int) float64 {
	if pods == 0 {
		return 0
	}
	return v / float64(pods)
}

// millicores is CPU time over a window as thousandths of a core.
func millicores(d, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return 1000 * d.Seconds() / window.Seconds()
}

func perMinute(n int, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(n) / window.Minutes()
}

// densityRows are the curve's rows, point by point: the start, then per
// pod while steady (CPU in millicores, memory in MiB, the totals in
// brackets), then the delete. The ratios of the per-pod rows are those of
// the totals (same pods on both nodes).
func densityRows(counts []int) []row {
	var out []row
	for _, n := range counts {
		p := func(r *nodeResult) *densityPoint { return r.point(n) }
		cpuPerPod := func(metric string, d func(*densityPoint) time.Duration) row {
			total := func(r *nodeResult) float64 { return millicores(d(p(r)), p(r).window) }
			return row{metric, func(r *nodeResult) float64 { return perPod(total(r), n) }, func(r *nodeResult) string {
				return fmt.Sprintf("%.2f m/pod (%.0f m)", perPod(total(r), n), total(r))
			}, "lighter"}
		}
		memPerPod := func(metric string, b func(*densityPoint) int64) row {
			return row{metric, func(r *nodeResult) float64 { return perPod(float64(b(p(r))), n) }, func(r *nodeResult) string {
				return fmt.Sprintf("%.2f MiB/pod (%s)", perPod(float64(b(p(r))), n)/(1<<20), mib(b(p(r))))
			}, "lighter"}
		}
		out = append(out,
			durRow(fmt.Sprintf("density %d pods: create → all Running", n), func(r *nodeResult) time.Duration { return p(r).allRunning }),
			durRow(fmt.Sprintf("density %d: create → Running, p50", n), func(r *nodeResult) time.Duration { return p(r).start.pct(50) }),
			cpuSpanRow(fmt.Sprintf("density %d, start: CPU of the agent (and what it runs)", n), func(r *nodeResult) time.Duration { return p(r).startCPU.agent }),
			cpuSpanRow(fmt.Sprintf("density %d, start: CPU of containerd, shims, runc", n), func(r *nodeResult) time.Duration { return p(r).startCPU.runtime }),
			countRow(fmt.Sprintf("density %d, start: API writes by the node", n), "fewer", func(r *nodeResult) int { return p(r).startWrites }),
			cpuPerPod(fmt.Sprintf("density %d steady: agent CPU per pod", n), func(p *densityPoint) time.Duration { return p.cpu.agent }),
			cpuPerPod(fmt.Sprintf("density %d steady: containerd + shims CPU per pod", n), func(p *densityPoint) time.Duration { return p.cpu.runtime }),
			cpuPerPod(fmt.Sprintf("density %d steady: agent + containerd + shims CPU per pod", n), func(p *densityPoint) time.Duration { return p.cpu.agent + p.cpu.runtime }),
			memPerPod(fmt.Sprintf("density %d steady: agent RSS per pod", n), func(p *densityPoint) int64 { return p.agentRSS }),
			memPerPod(fmt.Sprintf("density %d steady: containerd RSS per pod", n), func(p *densityPoint) int64 { return p.ctrdRSS }),
			memPerPod(fmt.Sprintf("density %d steady: shims PSS per pod", n), func(p *densityPoint) int64 { return p.shimsPSS }),
			memPerPod(fmt.Sprintf("density %d steady: agent + containerd RSS + shims PSS per pod", n), func(p *densityPoint) int64 { return p.agentRSS + p.ctrdRSS + p.shimsPSS }),
			row{fmt.Sprintf("density %d steady: API writes by the node per minute", n),
				func(r *nodeResult) float64 { return perMinute(p(r).writes, p(r).window) },
				func(r *nodeResult) string { return fmt.Sprintf("%.0f", perMinute(p(r).writes, p(r).window)) }, "fewer"},
			countRow(fmt.Sprintf("density %d steady: pods not Running", n), "", func(r *nodeResult) int { return p(r).notRunningAtWindow }),
			durRow(fmt.Sprintf("density %d: delete → all gone", n), func(r *nodeResult) time.Duration { return p(r).allGone }),
		)
	}
	return append(out, marginalRows(counts)...)
}

// memTotal and cpuTotal are a point's steady memory (agent and containerd
// RSS, shims' PSS) and CPU (millicores of both groups).
func (p *densityPoint) memTotal() int64 { return p.agentRSS + p.ctrdRSS + p.shimsPSS }
func (p *densityPoint) cpuTotal() float64 {
	return millicores(p.cpu.agent+p.cpu.runtime, p.window)
}

// marginalRows are what each pod added between consecutive points of the
// curve costs: the slope, without the agent's and containerd's base that
// the per-pod rows spread over the pods.
func marginalRows(counts []int) []row {
	var out []row
	for i := 1; i < len(counts); i++ {
		a, b := counts[i-1], counts[i]
		if b == a {
			continue
		}
		mem := func(r *nodeResult) float64 {
			return float64(r.point(b).memTotal()-r.point(a).memTotal()) / float64(b-a)
		}
		cpu := func(r *nodeResult) float64 { return (r.point(b).cpuTotal() - r.point(a).cpuTotal()) / float64(b-a) }
		out = append(out,
			row{fmt.Sprintf("density %d → %d: agent + containerd + shims CPU per added pod", a, b), cpu,
				func(r *nodeResult) string { return fmt.Sprintf("%.2f m", cpu(r)) }, "lighter"},
			row{fmt.Sprintf("density %d → %d: agent + containerd RSS + shims PSS per added pod", a, b), mem,
				func(r *nodeResult) string { return fmt.Sprintf("%.2f MiB", mem(r)/(1<<20)) }, "lighter"},
		)
	}
	return out
}

// joinPhase is the median over a node's joins of one phase.
func joinPhase(f func(joinResult) time.Duration) func(*nodeResult) time.Duration {
	return func(r *nodeResult) time.Duration {
		var d dist
		for _, j := range r.joins {
			d = append(d, f(j))
		}
		sortDist(d)
		return d.pct(50)
	}
}

// joinRows are the join's phases, from the join's start: the median of
// each over the joins.
func joinRows(joins int) []row {
	writes := func(r *nodeResult) int {
		var d dist
		for _, j := range r.joins {
			d = append(d, time.Duration(j.writes))
		}
		sortDist(d)
		return int(d.pct(50))
	}
	return []row{
		durRow(fmt.Sprintf("join (p50 of %d): start → client certificate issued", joins), joinPhase(func(j joinResult) time.Duration { return j.cert })),
		durRow("join: client certificate issued → Node Ready", joinPhase(func(j joinResult) time.Duration { return j.ready - j.cert })),
		durRow("join: start → Node Ready", joinPhase(func(j joinResult) time.Duration { return j.ready })),
		durRow("join: first pod, created once Ready → Running", joinPhase(func(j joinResult) time.Duration { return j.podStart })),
		durRow("join: start → first pod Running", joinPhase(func(j joinResult) time.Duration { return j.running })),
		countRow("join: API writes by the node, start → pod Running", "fewer", writes),
	}
}

// extraHeader says how the density and join scenarios measure, if run.
func extraHeader(c config) string {
	var b strings.Builder
	if c.scenarios["density"] {
		fmt.Fprintf(&b, `- density: %s busybox sleepers started at once (both nodes --max-pods %d), Running for %v, then
  held %v: CPU of the agent's and containerd's cpuacct groups (containerd's with its shims and runc) in
  millicores, the max VmRSS of the agent and of containerd, the shims' PSS at the end, API writes; per pod
`, joinInts(c.density), maxPods(c), settle, c.densityWindow)
	}
	if c.scenarios["join"] {
		fmt.Fprintf(&b, "- join: %d more nodes of each kind, one after the other (the table: each phase's median), on a host\n", c.joins)
		b.WriteString("  with its containerd running and the images present:\n" +
			"  hostlet: `hostlet join` (bootstrap token, CA pin, discovery of kube-public/cluster-info), then hostlet\n" +
			"  from the files join wrote; kubelet: TLS bootstrap from a --bootstrap-kubeconfig with the same token\n" +
			"  (written before the start: no discovery). The token and kubeadm's RBAC (node-bootstrapper, the\n" +
			"  csrapprover's nodeclient role) from charts/hostlet. A sleeper pod is created once the Node is Ready\n")
	}
	if c.scenarios["images"] {
		fmt.Fprintf(&b, `- images: a %d MB image (an idle program, then layers of at most 100 MB of 10 MB files of a seeded
  ChaCha8 stream: the same digests every run, incompressible) pushed to a loopback registry (plain HTTP)
  as gzip and as eStargz; %d pods of it created at once, IfNotPresent, to Running. hostlet: fresh nodes,
  each with a containerd of its own (empty content store), removed after each case: a normal pull, a lazy
  pull (the stargz snapshotter with its defaults, background fetch on: its bytes are those served by the
  time all pods ran), %d nodes at once without and with --registry-mirror (the pods spread over them), and
  with the mirror staggered (the first node's pods, then the others' once those run: peers that have the
  image). kubelet: its node's normal pull (CRI), the image removed after
`, c.imageMB, c.imagePods, c.imageNodes)
	}
	if c.scenarios["statefulset"] {
		fmt.Fprintf(&b, `- statefulset: a StatefulSet of %d busybox sleepers (Parallel pod management, pinned by nodeSelector),
  each with a 16 MiB claim of its volumeClaimTemplate: a WaitForFirstConsumer class of a CSI driver of the
  node's own (test/images/csihostdir on the host, registered through the node's plugins_registry, with
  upstream's external-provisioner and external-attacher); create → all Ready; then the StatefulSet and its
  claims deleted → all pods gone, all PVs deleted (detached, DeleteVolume), no mount left under the root dir
`, c.stsReplicas)
	}
	return b.String()
}

func joinInts(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, fmt.Sprint(n))
	}
	return strings.Join(s, ", ")
}

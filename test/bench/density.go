package main

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hostlet/hostlet/test/harness"
)

// densityPoint is one point of the density curve on one node: N sleepers
// started at once, then held steady for the window.
type densityPoint struct {
	pods        int
	allRunning  time.Duration
	start       dist
	startCPU    cpuUse
	startWrites int
	// Over the steady window: CPU of the agent's and the runtime's
	// cpuacct groups (the agent with what it forks; containerd with its
	// shims and runc), the largest VmRSS of the agent and of containerd
	// (1 s samples), the shims' PSS at the window's end, the node's API
	// writes.
	window             time.Duration
	cpu                cpuUse
	agentRSS, ctrdRSS  int64
	shims              int
	shimsPSS           int64
	writes             int
	allGone            time.Duration
	notRunningAtWindow int
}

// settle is how long a density point's pods run before the window: the
// status updates and events of their start drain first.
const settle = 10 * time.Second

// density takes the node through the curve's pod counts, one after the
// other, each deleted before the next starts.
func (b *bench) density(ctx context.Context, t target, r *nodeResult) error {
	n, err := b.cs.CoreV1().Nodes().Get(ctx, t.node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	capacity := n.Status.Capacity.Pods().Value()
	for _, pods := range b.cfg.density {
		if int64(pods) > capacity {
			return fmt.Errorf("node %s has capacity for %d pods, the density curve asks for %d (--max-pods)", t.node, capacity, pods)
		}
	}
	log.Infof("[%s] node capacity: %d pods", t.label, capacity)
	for _, pods := range b.cfg.density {
		log.Infof("[%s] density: %d pods, then %v steady", t.label, pods, b.cfg.densityWindow)
		p, err := b.densityPoint(ctx, t, r, pods)
		if err != nil {
			return fmt.Errorf("%d pods: %w", pods, err)
		}
		if r.density == nil {
			r.density = map[int]*densityPoint{}
		}
		r.density[pods] = p
	}
	return nil
}

// densityTimeout bounds each wait of a density point: longer for more
// pods, as a loaded machine starts them at some pods per second.
func densityTimeout(pods int) time.Duration {
	return max(3*time.Minute, time.Duration(pods)*3*time.Second)
}

func (b *bench) densityPoint(ctx context.Context, t target, r *nodeResult, n int) (*densityPoint, error) {
	scenario := fmt.Sprintf("density%d", n)
	var pods []*v1.Pod
	for i := range n {
		pods = append(pods, sleeperPod(t.node, t.ns, scenario, i))
	}
	p := &densityPoint{pods: n}
	mark, t0 := t.cpuMark(), time.Now()
	tr, created, running, err := b.launch(ctx, t, scenario, pods, "running",
		map[string]cond{"running": harness.PodRunning}, densityTimeout(n))
	if err != nil {
		return nil, err
	}
	defer tr.stop()
	p.startCPU.since(t, mark)
	if p.startWrites, _, err = b.audit.writes(t.node, t0, time.Now()); err != nil {
		return nil, err
	}
	p.allRunning, p.start = span(created, running), latencies(created, running)
	log.Infof("[%s] %d of %d pods Running after %v", t.label, len(running), n, p.allRunning.Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(settle):
	}
	agent, err := newSampler(t.agentPid)
	if err != nil {
		return nil, err
	}
	ctrd, err := newSampler(t.runtimePid)
	if err != nil {
		return nil, err
	}
	mark, from := t.cpuMark(), time.Now()
	tick := time.NewTicker(time.Second)
	for time.Since(from) < b.cfg.densityWindow {
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
		if err := agent.sample(); err != nil {
			return nil, err
		}
		if err := ctrd.sample(); err != nil {
			return nil, err
		}
	}
	tick.Stop()
	p.cpu.since(t, mark)
	to := time.Now()
	p.window = to.Sub(from)
	a, err := agent.result()
	if err != nil {
		return nil, err
	}
	c, err := ctrd.result()
	if err != nil {
		return nil, err
	}
	p.agentRSS, p.ctrdRSS = a.maxRSS, c.maxRSS
	idle, err := measureIdle(t)
	if err != nil {
		return nil, err
	}
	p.shims, p.shimsPSS = idle.shims, idle.shimsPSS
	if p.writes, _, err = b.audit.writes(t.node, from, to); err != nil {
		return nil, err
	}
	for _, name := range names(pods) {
		if ok, _ := harness.PodRunning(tr.pod(name)); !ok {
			p.notRunningAtWindow++
		}
	}
	deleted, goneAt, err := b.remove(ctx, tr, pods, densityTimeout(n))
	if err != nil {
		return nil, err
	}
	p.allGone = span(deleted, goneAt)
	r.count(fmt.Sprintf("density of %d", n), pods, running, goneAt)
	return p, nil
}

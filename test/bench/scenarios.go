package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hostlet/hostlet/test/harness"
)

// target is one node under measurement.
type target struct {
	node       string // Node name
	label      string // column title
	ns         string // namespace of its pods
	agentPid   int    // hostlet or kubelet
	runtimePid int    // the containerd it drives
	socket     string // that containerd's socket, which its shims name
	prof       *profiler
	// The agent's and its containerd's cpuacct groups, the control plane's
	// (shared by the targets) and the node's pods' (nil: not counted).
	agentCG, runtimeCG, controlCG, podsCG *cpuGroup
	// joiner joins a second node of this kind (the join scenario).
	joiner joiner
	// cri is the kubelet's containerd (nil on hostlet's node).
	cri *criRuntime
	// rootDir is the agent's root dir (plugins_registry, pods' volumes).
	rootDir string
}

// nodeResult is everything measured on one node.
type nodeResult struct {
	start, del, exit    dist
	allRunning, allGone time.Duration // the slowest round's
	rounds              []roundCount
	idle                idleRSS
	// CPU of the agent's and the runtime's groups over the bursts' start
	// (create → all Running or Ready) and delete (delete → all gone).
	startCPU, delCPU             cpuUse
	probedStartCPU, probedDelCPU cpuUse
	probed                       int
	probedReady                  time.Duration
	probedStart                  dist
	probedRunning                time.Duration // create -> Running (container started) of the same pods,
	probedRun                    dist          // which the probes' wait comes after
	probedGone                   time.Duration
	agent, runtime               usage
	window                       time.Duration
	steadyWrites                 int
	steadyWritesBy               map[string]int
	notReadyAtEnd                int
	runWrites                    int
	runAgentCPU, runTime         time.Duration
	density                      map[int]*densityPoint // by pod count
	joins                        []joinResult
	pulls                        []pullCase
	sts                          *stsResult
}

type bench struct {
	cs      kubernetes.Interface
	cluster *harness.Cluster
	audit   *auditLog
	cfg     config
	// The join scenario's cluster side, set up for the first node joined.
	bsOnce sync.Once
	bs     *bootstrap
	bsErr  error
	// The images scenario's registry and big image, set up once.
	imgOnce    sync.Once
	img        *bigImages
	imgErr     error
	cl         *cleanups // the run's, for what lives until its end
	hostletBin string
	imgs       *benchImages
	hostsDirs  []string // registry hosts dirs of the other runtimes (the kubelet's)
}

// runNode takes one node through all measurements, one after the other.
func (b *bench) runNode(ctx context.Context, t target) (*nodeResult, error) {
	r := &nodeResult{}
	t0 := time.Now()
	cpu0, err := cpuTime(t.agentPid)
	if err != nil {
		return nil, err
	}
	if b.cfg.scenarios["burst"] {
		log.Infof("[%s] start and delete %d pods", t.label, b.cfg.pods)
		if err := b.startDelete(ctx, t, r); err != nil {
			return nil, fmt.Errorf("start/delete: %w", err)
		}
	}
	if b.cfg.scenarios["exit"] {
		log.Infof("[%s] exit -> status, %d pods", t.label, b.cfg.exits)
		if err := b.exits(ctx, t, r); err != nil {
			return nil, fmt.Errorf("exit latency: %w", err)
		}
	}
	if b.cfg.scenarios["probed"] {
		log.Infof("[%s] steady cost: %d pods probed every second, %v", t.label, b.cfg.probed, b.cfg.window)
		if err := b.steady(ctx, t, r); err != nil {
			return nil, fmt.Errorf("steady: %w", err)
		}
	}
	if b.cfg.scenarios["join"] {
		log.Infof("[%s] join: bootstrap token -> node Ready -> first pod Running", t.label)
		if err := b.join(ctx, t, r); err != nil {
			return nil, fmt.Errorf("join: %w", err)
		}
	}
	if b.cfg.scenarios["density"] {
		if err := b.density(ctx, t, r); err != nil {
			return nil, fmt.Errorf("density: %w", err)
		}
	}
	if b.cfg.scenarios["images"] {
		if err := b.images(ctx, t, r); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
	}
	if b.cfg.scenarios["statefulset"] {
		log.Infof("[%s] statefulset: %d replicas on CSI volumes", t.label, b.cfg.stsReplicas)
		if err := b.statefulset(ctx, t, r); err != nil {
			return nil, fmt.Errorf("statefulset: %w", err)
		}
	}
	cpu1, err := cpuTime(t.agentPid)
	if err != nil {
		return nil, err
	}
	r.runAgentCPU, r.runTime = cpu1-cpu0, time.Since(t0)
	r.runWrites, _, err = b.audit.writes(t.node, t0, time.Now())
	return r, err
}

// createAll creates pods concurrently, as a controller scaling up would,
// and returns when each Create call started.
func (b *bench) createAll(ctx context.Context, pods []*v1.Pod) (map[string]time.Time, error) {
	return b.each(pods, func(p *v1.Pod) error {
		_, err := b.cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
}

// deleteAll deletes pods concurrently (default grace period) and returns
// when each Delete call started.
func (b *bench) deleteAll(ctx context.Context, pods []*v1.Pod) (map[string]time.Time, error) {
	return b.each(pods, func(p *v1.Pod) error {
		return b.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	})
}

func (b *bench) each(pods []*v1.Pod, fn func(*v1.Pod) error) (map[string]time.Time, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	started, errs := map[string]time.Time{}, []error{}
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now()
			err := fn(p)
			mu.Lock()
			defer mu.Unlock()
			started[p.Name] = at
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return started, nil
}

func names(pods []*v1.Pod) []string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	return n
}

// launch tracks scenario's pods (conds, and deletion), creates them all at
// once and waits until every one meets cond first. It returns the tracker
// (the caller stops it), when each Create started and when each pod first
// met first. Pods that do not meet it in time are logged and left out of
// reached (the caller counts them), not fatal.
func (b *bench) launch(ctx context.Context, t target, scenario string, pods []*v1.Pod, first string, conds map[string]cond,
	timeout time.Duration) (tr *tracker, created, reached map[string]time.Time, err error) {
	if tr, err = track(ctx, b.cs, t.ns, scenario, conds); err != nil {
		return nil, nil, nil, err
	}
	if created, err = b.createAll(ctx, pods); err == nil {
		reached, err = tr.wait(ctx, first, names(pods), timeout)
		if late := (*notMetError)(nil); errors.As(err, &late) {
			log.Errorf("[%s] %v", t.label, err)
			reached, err = tr.times(first), nil
		}
	}
	if err != nil {
		tr.stop()
		return nil, nil, nil, err
	}
	return tr, created, reached, nil
}

// remove deletes pods at once and waits until they are gone; it returns when
// each Delete started and when each pod was gone. Pods not gone in time are
// logged and left out of goneAt, not fatal.
func (b *bench) remove(ctx context.Context, tr *tracker, pods []*v1.Pod, timeout time.Duration) (deleted, goneAt map[string]time.Time, err error) {
	if deleted, err = b.deleteAll(ctx, pods); err != nil {
		return nil, nil, err
	}
	goneAt, err = tr.wait(ctx, gone, names(pods), timeout)
	if late := (*notMetError)(nil); errors.As(err, &late) {
		log.Error(err)
		goneAt, err = tr.times(gone), nil
	}
	return deleted, goneAt, err
}

// roundCount is what became of one burst's pods on one node: a pod that
// never got Running or never went after its delete is lost.
type roundCount struct {
	name                    string
	expected, reached, gone int
}

func (c roundCount) lost() int { return 2*c.expected - c.reached - c.gone }

// count records how many of pods reached and went in a round.
func (r *nodeResult) count(name string, pods []*v1.Pod, reached, goneAt map[string]time.Time) {
	r.rounds = append(r.rounds, roundCount{name: name, expected: len(pods), reached: len(reached), gone: len(goneAt)})
}

// startDelete: rounds of N sleepers created at once, create -> Running (as
// an API watcher sees it); then all deleted at once, delete -> gone. Every
// round reuses the names of the one before, deleted just before, as a
// StatefulSet does. The first round also measures RSS with the N pods idle.
func (b *bench) startDelete(ctx context.Context, t target, r *nodeResult) error {
	for round := range b.cfg.rounds {
		if err := b.startDeleteRound(ctx, t, r, round); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) startDeleteRound(ctx context.Context, t target, r *nodeResult, round int) error {
	var pods []*v1.Pod
	for i := range b.cfg.pods {
		pods = append(pods, sleeperPod(t.node, t.ns, "start", i))
	}
	// The first round is profiled (-profile), start and delete.
	prof := t.prof
	if round > 0 {
		prof = nil
	}
	if err := prof.begin(); err != nil {
		return err
	}
	mark := t.cpuMark()
	tr, created, running, err := b.launch(ctx, t, "start", pods, "running",
		map[string]cond{"running": harness.PodRunning}, 3*time.Minute)
	if err != nil {
		return err
	}
	defer tr.stop()
	r.startCPU.since(t, mark)
	if err := prof.end("burst-start"); err != nil {
		return err
	}
	r.start = append(r.start, latencies(created, running)...)
	r.allRunning = max(r.allRunning, span(created, running))
	if round == 0 {
		log.Infof("[%s] %d pods idle for %v, then RSS", t.label, len(running), b.cfg.idle)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.cfg.idle):
		}
		if r.idle, err = measureIdle(t); err != nil {
			return err
		}
	}
	if err := prof.begin(); err != nil {
		return err
	}
	mark = t.cpuMark()
	deleted, goneAt, err := b.remove(ctx, tr, pods, 3*time.Minute)
	if err != nil {
		return err
	}
	r.delCPU.since(t, mark)
	if err := prof.end("burst-delete"); err != nil {
		return err
	}
	r.del = append(r.del, latencies(deleted, goneAt)...)
	r.allGone = max(r.allGone, span(deleted, goneAt))
	r.count(fmt.Sprintf("burst of %d, round %d", len(pods), round+1), pods, running, goneAt)
	sortDist(r.start)
	sortDist(r.del)
	return nil
}

// exits: the container's PID 1 is SIGKILLed from the host at a recorded
// instant, one pod at a time with random spacing (so kills do not line up
// with a periodic relist), until the API shows it terminated.
func (b *bench) exits(ctx context.Context, t target, r *nodeResult) error {
	var pods []*v1.Pod
	for i := range b.cfg.exits {
		pods = append(pods, exitPod(t.node, t.ns, i))
	}
	tr, _, _, err := b.launch(ctx, t, "exit", pods, "running",
		map[string]cond{"running": harness.PodRunning, "terminated": containerTerminated}, 3*time.Minute)
	if err != nil {
		return err
	}
	defer tr.stop()
	killed := map[string]time.Time{}
	for i, p := range pods {
		pid, err := findSleeper(sleepArg(i))
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(300+rand.IntN(1000)) * time.Millisecond)
		killed[p.Name] = time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill %s's container (pid %d): %w", p.Name, pid, err)
		}
		if _, err := tr.wait(ctx, "terminated", []string{p.Name}, time.Minute); err != nil {
			return err
		}
		checkFinishedAt(tr.pod(p.Name), killed[p.Name])
	}
	r.exit = latencies(killed, tr.times("terminated"))
	_, goneAt, err := b.remove(ctx, tr, pods, 2*time.Minute)
	r.count(fmt.Sprintf("%d exits", len(pods)), pods, tr.times("running"), goneAt)
	return err
}

// checkFinishedAt warns when the reported exit does not match the kill:
// a node that reported the wrong moment would make the latency meaningless.
func checkFinishedAt(p *v1.Pod, killed time.Time) {
	for _, s := range p.Status.ContainerStatuses {
		term := s.State.Terminated
		if term == nil {
			continue
		}
		if f := term.FinishedAt.Time; f.Before(killed.Truncate(time.Second)) || f.After(killed.Add(time.Second)) {
			log.Warnf("%s: finishedAt %v, but killed at %v", p.Name, f, killed.Format(time.RFC3339Nano))
		}
		if term.ExitCode != 137 {
			log.Warnf("%s: exit code %d, want 137 (SIGKILL)", p.Name, term.ExitCode)
		}
	}
}

// steady: M pods with a 1 s HTTP readiness probe; once all are Ready, the
// node agent's and its containerd's CPU and RSS and the node's API writes
// over a fixed window; then all are deleted.
func (b *bench) steady(ctx context.Context, t target, r *nodeResult) error {
	var pods []*v1.Pod
	for i := range b.cfg.probed {
		pods = append(pods, probedPod(t.node, t.ns, i))
	}
	r.probed = len(pods)
	if err := t.prof.begin(); err != nil {
		return err
	}
	mark := t.cpuMark()
	tr, created, ready, err := b.launch(ctx, t, "probed", pods, "ready",
		map[string]cond{"ready": harness.PodReady, "running": harness.PodRunning}, 6*time.Minute)
	if err != nil {
		return err
	}
	r.probedStartCPU.since(t, mark)
	if err := t.prof.end("ready"); err != nil {
		return err
	}
	defer tr.stop()
	r.probedReady, r.probedStart = span(created, ready), latencies(created, ready)
	running := tr.times("running")
	r.probedRunning, r.probedRun = span(created, running), latencies(created, running)
	// Let the start-up burst (status updates, events) drain first.
	time.Sleep(5 * time.Second)
	agent, err := newSampler(t.agentPid)
	if err != nil {
		return err
	}
	runtime, err := newSampler(t.runtimePid)
	if err != nil {
		return err
	}
	if err := t.prof.begin(); err != nil {
		return err
	}
	from := time.Now()
	tick := time.NewTicker(time.Second)
	for time.Since(from) < b.cfg.window {
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-tick.C:
		}
		if err := agent.sample(); err != nil {
			return err
		}
		if err := runtime.sample(); err != nil {
			return err
		}
	}
	tick.Stop()
	if err := t.prof.end("steady"); err != nil {
		return err
	}
	if r.agent, err = agent.result(); err != nil {
		return err
	}
	if r.runtime, err = runtime.result(); err != nil {
		return err
	}
	to := time.Now()
	r.window = to.Sub(from)
	if r.steadyWrites, r.steadyWritesBy, err = b.audit.writes(t.node, from, to); err != nil {
		return err
	}
	for _, n := range names(pods) {
		if ok, _ := harness.PodReady(tr.pod(n)); !ok {
			r.notReadyAtEnd++
		}
	}
	if err := t.prof.begin(); err != nil {
		return err
	}
	mark = t.cpuMark()
	deleted, goneAt, err := b.remove(ctx, tr, pods, 4*time.Minute)
	if err != nil {
		return err
	}
	r.probedDelCPU.since(t, mark)
	if err := t.prof.end("delete"); err != nil {
		return err
	}
	r.probedGone = span(deleted, goneAt)
	r.count(fmt.Sprintf("burst of %d probed", len(pods)), pods, ready, goneAt)
	return nil
}

package lifecycle

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hostlet/hostlet/probes"
	log "github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Config wires a pod worker to the rest of hostlet.
type Config struct {
	Runtime  Runtime
	Recorder Recorder
	Backoff  Backoff
	// HostIPs are the node's addresses, reported as the pod's hostIPs.
	HostIPs []string
	// Publish receives every changed status (a copy of the pod with it).
	Publish func(*v1.Pod)
	// Terminated is called once a deleted pod has stopped everything, with
	// its final status; the caller writes it and removes the pod.
	Terminated func(*v1.Pod)
	// Released is called once, from the worker, when a pod ended without
	// being deleted (Succeeded or Failed, its containers stopped and its
	// final status published): what it no longer needs on the host
	// (volumes, cgroup) goes, as with the kubelet's SyncTerminatedPod;
	// its containers (for their logs) and its status stay.
	Released func(*v1.Pod)
	// Prober runs probes and lifecycle hooks.
	Prober Prober
	// Clock is the worker's time (back-off, deadlines, grace periods, probe
	// periods); nil is the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// VolumeMounts, if set, are a container's status.volumeMounts (with
	// each read-only mount's recursiveReadOnly as the node resolves it).
	VolumeMounts func(pod *v1.Pod, c *v1.Container) []v1.VolumeMountStatus
	// Allocator admits the pod's in-place resizes and records what it
	// admitted (resize.go); nil records nothing and admits no resize.
	Allocator Allocator
	// Tracer, if set, traces each sync (the kubelet's syncPod and
	// syncTerminatingPod spans); nil traces nothing.
	Tracer trace.Tracer
	// Previous, if set, is the final status of an earlier run of the pod
	// (a static pod put back in its source, same UID): its containers'
	// attempts go on from there and their last states are that run's, as
	// the kubelet's do from the dead containers it still has of it.
	Previous *v1.PodStatus
}

// container is the worker's record of one container name across attempts.
type container struct {
	name string
	// cur is the latest instance; cur.ID is empty before the first start.
	cur ContainerInfo
	// prev is the instance before cur, shown as lastState.
	prev *ContainerInfo
	// waiting is why the container is not running (while cur is absent or
	// it is being restarted).
	waiting *v1.ContainerStateWaiting
	// pullImage is the image a failed pull was for when it is not the
	// container's own (an image volume's): the back-off names it.
	pullImage string
	bo        backoffState
	// retryAt is when a restart or retried start may happen.
	retryAt    time.Time
	retryDelay time.Duration
	failures   int
	// crashLoop: the retry at retryAt follows a start whose process could
	// not run and made no instance (RunContainerError), on the crash-loop
	// back-off, shown as CrashLoopBackOff while it waits.
	crashLoop bool
	// Probe state of the running instance.
	ready, started bool
	killFor        probes.Kind
	probeCancel    context.CancelFunc
	// probeKilled: cur was killed by its probe (see afterProbeKill).
	probeKilled bool
	// restartKilled: cur was killed to be started again, whatever its
	// exit code: its definition (image) changed (whatever the restart
	// policy), or its liveness or startup probe failed in a pod that
	// restarts failures; the kubelet decides the restart before the kill.
	restartKilled bool
	// rerun: an init container that completed in an earlier sandbox and
	// runs again in the new one.
	rerun bool
	// actual is the resources instance actualFor runs with (see resize.go).
	actual    *v1.ResourceRequirements
	actualFor string
	// nextAttempt is the first start's attempt when an earlier run of the
	// pod had this container (Config.Previous).
	nextAttempt int
}

// Pod runs one pod in a single goroutine (Run). Its fields are of three
// kinds, and where a field is declared says which: those set by NewPod and
// never changed, which anyone reads; sharedState, which other goroutines
// (the provider, the runtime's exit events, probe workers) touch only under
// its mu; and workerState, the worker goroutine's alone (and of the
// goroutines it waits for, each given one container: stopAll), which
// nothing else reads, so it needs no lock.
type Pod struct {
	cfg   Config
	clock clock.WithTickerAndDelayedExecution
	// wake is poked when the mailbox has something; done is closed when
	// the worker finished a deleted pod; ended and released when a Stop
	// reached them (Stopping).
	wake, done, ended, released chan struct{}
	// resumed is set for a pod already being deleted when its worker was
	// created (hostlet restarted mid-termination): it only finishes that
	// termination, with the grace period left.
	resumed bool
	// idle is called (by tests) each time the worker waits for its next
	// event, with its timer's channel.
	idle func(timer <-chan time.Time)

	shared sharedState
	workerState
}

// sharedState is what other goroutines hand the worker (its mailbox, which
// the worker drains at each turn) and what the worker publishes for them.
// Guarded by mu, held for moments only (never across a runtime call).
type sharedState struct {
	mu sync.Mutex

	// The mailbox: the newest API object and whether it is being deleted
	// (Update), the runtime's exits (Exited), the node's stop (Stop), the
	// probe workers' verdicts and which instances passed their startup
	// probe.
	latest       *v1.Pod
	terminating  bool
	exits        []ContainerInfo
	stopReq      *StopRequest
	probeResults []probeResult
	startedIDs   map[string]bool
	// syncCancel interrupts the sync in progress (a pull, a hook, a start)
	// when the pod's deletion arrives (set by the worker, called by Update).
	syncCancel context.CancelFunc

	// status is the pod with the status the worker last published (Status).
	status *v1.Pod

	// The pod's in-place resize (resize.go), decided by DecideResize on the
	// node's goroutine and actuated by the worker: alloc is what the node
	// admitted, the resize conditions what the status reports, resources
	// the containers' resources of the newest object the node handed on
	// (whose change is a resize: ResizeRequested).
	alloc                           Allocation
	resizePending, resizeInProgress *v1.PodCondition
	resources                       []v1.ResourceRequirements
}

// workerState is the worker goroutine's own: the pod as it runs and the
// record of each of its containers. Nothing else reads it.
type workerState struct {
	ctx      context.Context
	stopping bool
	// pod is the spec as it runs (desired, with the allocated resources);
	// desired is the object as the API has it. Both are taken from the
	// mailbox at each turn (drain).
	pod, desired *v1.Pod
	containers   map[string]*container
	podIPs       []string
	sandboxOK    bool
	initialized  bool
	finished     bool
	startTime    metav1.Time
	sandboxRetry time.Time
	sandboxDelay time.Duration
	// failure is set once the node stopped the pod (deadline, shutdown): it
	// ends Failed with this reason, message and extra conditions.
	failure *StopRequest
	// endedClosed, releasedClosed: a Stop's channels are closed.
	endedClosed, releasedClosed bool
	// releaseDone: Released was called; nothing of the pod runs again.
	releaseDone bool
	// podCgroupShrink: a resize's pod-level decrease is still to be made
	// (its containers are resized already; resize.go).
	podCgroupShrink bool
}

// StopRequest asks the node to end a pod without deleting it: its
// containers are stopped within Grace and it ends Failed with Reason and
// Message, plus Conditions (DisruptionTarget on node shutdown).
type StopRequest struct {
	Grace           time.Duration
	Reason, Message string
	Conditions      []v1.PodCondition
}

// Stopping tells how far a Stop has come: each of the kubelet's callers
// waits for its own point.
type Stopping struct {
	// Ended is closed once the pod's containers and sandbox are stopped and
	// its final status is published: what the kubelet's node shutdown
	// waits for (killPodNow, the end of syncTerminatingPod).
	Ended <-chan struct{}
	// Released is closed once what the pod held on the host (volumes, pod
	// cgroup) is released too: what the kubelet's eviction manager waits
	// for before it looks at the node again.
	Released <-chan struct{}
}

func NewPod(pod *v1.Pod, cfg Config) *Pod {
	deleting := pod.DeletionTimestamp != nil
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Pod{
		cfg:      cfg,
		clock:    clk,
		resumed:  deleting,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		ended:    make(chan struct{}),
		released: make(chan struct{}),
		shared: sharedState{
			latest:      pod,
			terminating: deleting,
			startedIDs:  map[string]bool{},
			resources:   containerResources(pod),
		},
		workerState: workerState{containers: map[string]*container{}},
	}
}

// Update hands the worker the newest pod object (spec, metadata, deletion).
// A deletion interrupts whatever the worker is doing.
func (p *Pod) Update(pod *v1.Pod) {
	p.shared.mu.Lock()
	p.shared.latest = pod
	if pod.DeletionTimestamp != nil {
		p.shared.terminating = true
		if p.shared.syncCancel != nil {
			p.shared.syncCancel()
		}
	}
	p.shared.mu.Unlock()
	p.poke()
}

// Exited reports a container exit heard from the runtime.
func (p *Pod) Exited(info ContainerInfo) {
	p.shared.mu.Lock()
	p.shared.exits = append(p.shared.exits, info)
	p.shared.mu.Unlock()
	p.poke()
}

// Stop ends the pod Failed without deleting it; Stopping tells when it has
// ended and when what it held on the host is released.
func (p *Pod) Stop(req StopRequest) Stopping {
	p.shared.mu.Lock()
	if p.shared.stopReq == nil {
		p.shared.stopReq = &req
	}
	p.shared.mu.Unlock()
	p.poke()
	return Stopping{Ended: p.ended, Released: p.released}
}

// Status returns the pod with its latest computed status, or nil before the
// first sync.
func (p *Pod) Status() *v1.Pod {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	return p.shared.status
}

// Object returns the newest pod object the worker was given (spec and
// metadata; its status is the API's, not the computed one).
func (p *Pod) Object() *v1.Pod {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	return p.shared.latest
}

// Done is closed when the worker has finished a deleted pod.
func (p *Pod) Done() <-chan struct{} { return p.done }

func (p *Pod) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Pod) logger() *log.Entry {
	return PodLogger(p.pod)
}

// Run is the worker loop; it returns when ctx ends or the pod is gone.
// Each turn takes the mailbox, syncs, reports, and waits for the next
// event or the time the sync asked for.
func (p *Pod) Run(ctx context.Context) {
	p.ctx = ctx
	defer p.stopProbes()
	p.desired, p.pod = p.shared.spec()
	p.adopt(ctx)
	timer := p.clock.NewTimer(0)
	defer timer.Stop()
	for {
		if !p.drain() {
			p.terminate(ctx)
			close(p.done)
			return
		}
		next := p.syncOnce(ctx)
		p.report()
		p.rearm(timer, next)
		if p.idle != nil {
			p.idle(timer.C())
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-timer.C():
		}
	}
}

// report publishes what the sync changed: the resize's progress, the
// status, and once the pod ended the end of a Stop and its release
// (Released). A Stop's end is told before the release, which can take
// seconds (volumes, the pod's cgroup) that a node shutting down has not
// got: the kubelet's node shutdown waits only for the pod to end.
func (p *Pod) report() {
	p.resizeProgress()
	p.publish()
	if p.failure != nil && p.finished && !p.endedClosed {
		p.endedClosed = true
		close(p.ended)
	}
	if p.finished && !p.releaseDone {
		p.releaseDone = true
		if p.cfg.Released != nil {
			p.cfg.Released(p.Status())
		}
	}
	if p.failure != nil && !p.releasedClosed {
		p.releasedClosed = true
		close(p.released)
	}
}

// rearm sets timer to fire at next (a next passed pokes the worker at
// once; zero leaves it stopped).
func (p *Pod) rearm(timer clock.Timer, next time.Time) {
	if !timer.Stop() {
		select {
		case <-timer.C():
		default:
		}
	}
	if !next.IsZero() {
		if d := next.Sub(p.clock.Now()); d > 0 {
			timer.Reset(d)
		} else {
			p.poke()
		}
	}
}

// syncOnce runs one sync under a context the pod's deletion cancels.
func (p *Pod) syncOnce(ctx context.Context) time.Time {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.shared.mu.Lock()
	if p.shared.terminating {
		p.shared.mu.Unlock()
		return time.Time{}
	}
	p.shared.syncCancel = cancel
	p.shared.mu.Unlock()
	defer func() {
		p.shared.mu.Lock()
		p.shared.syncCancel = nil
		p.shared.mu.Unlock()
	}()
	sctx, span := p.startSpan(sctx, "syncPod")
	defer span.End()
	return p.sync(sctx)
}

// mail is what the worker takes out of its mailbox at one turn.
type mail struct {
	// desired is the newest object; pod, the same as it runs: with what
	// the node allocated, not a resize it has not admitted.
	desired, pod *v1.Pod
	exits        []ContainerInfo
	results      []probeResult
	stop         *StopRequest
	terminating  bool
}

// spec is the newest object, and the same as the pod runs it: with what
// the node allocated, not a resize it has not admitted.
func (s *sharedState) spec() (desired, pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pod, _ = s.alloc.Apply(s.latest)
	return s.latest, pod
}

// take empties the mailbox of what is consumed once (exits, probe
// verdicts) and reads the rest.
func (s *sharedState) take() mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := mail{desired: s.latest, exits: s.exits, results: s.probeResults, stop: s.stopReq, terminating: s.terminating}
	m.pod, _ = s.alloc.Apply(s.latest)
	s.exits, s.probeResults = nil, nil
	return m
}

// drain applies the mailbox; it returns false once termination is requested.
func (p *Pod) drain() bool {
	m := p.shared.take()
	p.desired, p.pod = m.desired, m.pod
	for _, r := range m.results {
		p.applyProbe(r)
	}
	if m.stop != nil && p.failure == nil {
		p.stopAll(context.Background(), m.stop.Grace)
		p.failure = m.stop
		p.finished = true
	}
	for _, e := range m.exits {
		if c := p.containers[e.Name]; c != nil && c.cur.ID == e.ID {
			if !c.cur.Exited && e.Exited {
				p.logger().WithFields(log.Fields{"container": e.Name, "exitCode": e.ExitCode, "reason": e.Reason}).Info("container exited")
			}
			c.cur = e
			if c.probeCancel != nil && !e.Running {
				c.probeCancel()
				c.probeCancel = nil
			}
		}
	}
	return !m.terminating
}

// continueFrom seeds the containers of an earlier run of the pod (its
// final status, Config.Previous) that the runtime has nothing of: the next
// start is the attempt after that run's, its last termination the
// container's last state, as the kubelet's next instance follows the dead
// one of the earlier run.
func (p *Pod) continueFrom(prev *v1.PodStatus) {
	all := append(append([]v1.ContainerStatus(nil), prev.InitContainerStatuses...), prev.ContainerStatuses...)
	for _, cs := range all {
		if rec := p.containers[cs.Name]; rec != nil && rec.cur.ID != "" {
			continue
		}
		t := cs.State.Terminated
		if t == nil {
			t = cs.LastTerminationState.Terminated
		}
		if t == nil && cs.ContainerID == "" {
			continue // never ran
		}
		rec := p.record(cs.Name)
		rec.nextAttempt = int(cs.RestartCount) + 1
		if t != nil {
			rec.prev = &ContainerInfo{ID: strings.TrimPrefix(t.ContainerID, "containerd://"), Name: cs.Name,
				Attempt: int(cs.RestartCount), Exited: true, ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message,
				StartedAt: t.StartedAt.Time, FinishedAt: t.FinishedAt.Time, Image: cs.Image, ImageID: cs.ImageID}
		}
	}
}

// adopt rebuilds state from what the runtime still has of this pod (after a
// restart of hostlet), so nothing running is restarted.
func (p *Pod) adopt(ctx context.Context) {
	if p.cfg.Previous != nil {
		defer p.continueFrom(p.cfg.Previous)
	}
	if p.pod.Status.StartTime != nil {
		p.startTime = *p.pod.Status.StartTime
	}
	infos, err := p.cfg.Runtime.Containers(ctx, p.pod)
	if err != nil {
		p.logger().WithError(err).Warn("listing containers for adoption")
		return
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Attempt < infos[j].Attempt })
	for _, info := range infos {
		c := p.record(info.Name)
		if c.cur.ID != "" {
			prev := c.cur
			c.prev = &prev
		}
		c.cur = info
		// The back-off continues where it was: the latest instance that
		// recorded one carries the delay the next exit gets, and an exited
		// one still waiting also when its restart is due. A restart due for
		// an older instance has happened (this one), so it is not kept: the
		// next exit gets its own wait.
		c.retryAt, c.retryDelay = time.Time{}, 0
		if info.BackoffNext > 0 {
			c.bo.delay = info.BackoffNext
			if info.Exited {
				c.retryAt, c.retryDelay = info.FinishedAt.Add(info.BackoffApplied), info.BackoffApplied
			}
		}
	}
	if p.resumed {
		// Only its termination is left: nothing is set up again and no
		// probe runs, so readiness never comes back.
		p.sandboxOK = p.cfg.Runtime.SandboxReady(p.pod)
		p.finished = p.finished || p.isTerminalPhase()
		return
	}
	// A worker run again after a panic never sets a finished pod up again.
	if !p.finished && len(infos) > 0 && p.cfg.Runtime.SandboxReady(p.pod) {
		if ips, err := p.cfg.Runtime.PrepareSandbox(ctx, p.pod); err == nil {
			p.podIPs, p.sandboxOK = ips, true
		}
	}
	// Main containers that exist mean initialization is done, but only in
	// the sandbox they ran in: in a new one (after a reboot) the init
	// containers run again first, as the kubelet does for a new sandbox.
	for i := range p.pod.Spec.Containers {
		if c := p.containers[p.pod.Spec.Containers[i].Name]; c != nil && c.cur.ID != "" && p.sandboxOK {
			p.initialized = true
		}
	}
	if len(infos) > 0 && !p.sandboxOK {
		p.rerunInit()
	}
	for _, c := range p.allContainers() {
		if rec := p.containers[c.Name]; rec != nil && rec.cur.Running {
			p.startProbes(c, rec, true)
		}
	}
	p.finished = p.finished || p.isTerminalPhase()
}

// rerunInit makes the init containers that ran in a sandbox now gone run
// again, from the first, as the kubelet does when it creates a new sandbox
// for a pod; a pod that never restarts runs nothing again.
func (p *Pod) rerunInit() {
	if p.pod.Spec.RestartPolicy == v1.RestartPolicyNever {
		return
	}
	for i := range p.pod.Spec.InitContainers {
		if rec := p.containers[p.pod.Spec.InitContainers[i].Name]; rec != nil && rec.cur.ID != "" {
			rec.rerun = true
		}
	}
}

func (p *Pod) record(name string) *container {
	c := p.containers[name]
	if c == nil {
		c = &container{name: name}
		p.containers[name] = c
	}
	return c
}

func (p *Pod) isTerminalPhase() bool {
	return Terminal(p.pod.Status.Phase)
}

// publish computes the status and hands it on when it changed.
func (p *Pod) publish() {
	st := p.computeStatus()
	p.shared.mu.Lock()
	prev := p.shared.status
	if prev != nil && equality.Semantic.DeepEqual(prev.Status, st) {
		p.shared.mu.Unlock()
		return
	}
	// The pod as the API has it, with its status: a resize not admitted
	// yet is not shown as undone.
	out := p.desired.DeepCopy()
	out.Status = st
	p.shared.status = out
	p.shared.mu.Unlock()
	if p.cfg.Publish != nil {
		p.cfg.Publish(out)
	}
}

func (p *Pod) event(container, eventType, reason, msg string) {
	p.recordEvent(p.pod, container, eventType, reason, msg)
}

// recordEvent emits an event about pod (the worker's spec, or from another
// goroutine its newest object), or one of its containers.
func (p *Pod) recordEvent(pod *v1.Pod, container, eventType, reason, msg string) {
	if p.cfg.Recorder != nil {
		p.cfg.Recorder.Event(pod, container, eventType, reason, msg)
	}
}

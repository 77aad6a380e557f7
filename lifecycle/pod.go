package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	// Probe state of the running instance.
	ready, started bool
	killFor        probes.Kind
	probeCancel    context.CancelFunc
	// probeKilled: cur was killed by its probe (see afterProbeKill).
	probeKilled bool
	// rerun: an init container that completed in an earlier sandbox and
	// runs again in the new one.
	rerun bool
	// actual is the resources instance actualFor runs with (see resize.go).
	actual    *v1.ResourceRequirements
	actualFor string
}

// Pod runs one pod: it owns that pod's state in a single goroutine; other
// goroutines only leave updates in its mailbox.
type Pod struct {
	cfg   Config
	clock clock.WithTickerAndDelayedExecution

	mu          sync.Mutex
	latest      *v1.Pod
	exits       []ContainerInfo
	status      *v1.Pod
	wake        chan struct{}
	done        chan struct{}
	terminating bool
	// resumed is set for a pod already being deleted when its worker was
	// created (hostlet restarted mid-termination): it only finishes that
	// termination, with the grace period left.
	resumed bool
	// syncCancel interrupts the sync in progress (a pull, a hook, a start)
	// when the pod's deletion arrives.
	syncCancel context.CancelFunc
	stopReq    *StopRequest
	stopped    chan struct{}
	// probeResults and startedIDs are written by probe workers.
	probeResults []probeResult
	startedIDs   map[string]bool
	// alloc and the resize conditions are the node's admission of the
	// pod's resources (resize.go).
	alloc                           Allocation
	resizePending, resizeInProgress *v1.PodCondition
	// resources are the containers' resources of the newest object the
	// node handed on, whose change is a resize (ResizeRequested).
	resources []v1.ResourceRequirements

	// Owned by the worker goroutine.
	ctx      context.Context
	stopping bool
	// pod is the spec as it runs (desired, with the allocated resources);
	// desired is the object as the API has it.
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
	failure  *StopRequest
	stopDone bool
	// released: Released was called; nothing of the pod runs again.
	released bool
	// podCgroupShrink: a resize's pod-level decrease is still to be made
	// (its containers are resized already; resize.go).
	podCgroupShrink bool
	// idle is called (by tests) each time the worker waits for its next
	// event, with its timer's channel.
	idle func(timer <-chan time.Time)
}

// StopRequest asks the node to end a pod without deleting it: its
// containers are stopped within Grace and it ends Failed with Reason and
// Message, plus Conditions (DisruptionTarget on node shutdown).
type StopRequest struct {
	Grace           time.Duration
	Reason, Message string
	Conditions      []v1.PodCondition
}

func NewPod(pod *v1.Pod, cfg Config) *Pod {
	deleting := pod.DeletionTimestamp != nil
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Pod{
		cfg:         cfg,
		clock:       clk,
		latest:      pod,
		terminating: deleting,
		resumed:     deleting,
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		stopped:     make(chan struct{}),
		startedIDs:  map[string]bool{},
		containers:  map[string]*container{},
		resources:   containerResources(pod),
	}
}

// Update hands the worker the newest pod object (spec, metadata, deletion).
// A deletion interrupts whatever the worker is doing.
func (p *Pod) Update(pod *v1.Pod) {
	p.mu.Lock()
	p.latest = pod
	if pod.DeletionTimestamp != nil {
		p.terminating = true
		if p.syncCancel != nil {
			p.syncCancel()
		}
	}
	p.mu.Unlock()
	p.poke()
}

// Exited reports a container exit heard from the runtime.
func (p *Pod) Exited(info ContainerInfo) {
	p.mu.Lock()
	p.exits = append(p.exits, info)
	p.mu.Unlock()
	p.poke()
}

// Stop ends the pod Failed without deleting it; the returned channel is
// closed once its containers are stopped, the status is published and what
// it held on the host is released (as the kubelet's eviction manager waits
// for an evicted pod's resources to be reclaimed).
func (p *Pod) Stop(req StopRequest) <-chan struct{} {
	p.mu.Lock()
	if p.stopReq == nil {
		p.stopReq = &req
	}
	p.mu.Unlock()
	p.poke()
	return p.stopped
}

// Status returns the pod with its latest computed status, or nil before the
// first sync.
func (p *Pod) Status() *v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Object returns the newest pod object the worker was given (spec and
// metadata; its status is the API's, not the computed one).
func (p *Pod) Object() *v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest
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
func (p *Pod) Run(ctx context.Context) {
	p.ctx = ctx
	defer p.stopProbes()
	p.mu.Lock()
	p.desired = p.latest
	p.pod, _ = p.alloc.Apply(p.latest)
	p.mu.Unlock()
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
		p.resizeProgress()
		p.publish()
		if p.finished && !p.released {
			p.released = true
			if p.cfg.Released != nil {
				p.cfg.Released(p.Status())
			}
		}
		if p.failure != nil && !p.stopDone {
			p.stopDone = true
			close(p.stopped)
		}
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

// syncOnce runs one sync under a context the pod's deletion cancels.
func (p *Pod) syncOnce(ctx context.Context) time.Time {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.mu.Lock()
	if p.terminating {
		p.mu.Unlock()
		return time.Time{}
	}
	p.syncCancel = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.syncCancel = nil
		p.mu.Unlock()
	}()
	sctx, span := p.startSpan(sctx, "syncPod")
	defer span.End()
	return p.sync(sctx)
}

// drain applies the mailbox; it returns false once termination is requested.
func (p *Pod) drain() bool {
	p.mu.Lock()
	// The pod runs with what the node allocated, not a resize it has not
	// admitted.
	p.desired = p.latest
	p.pod, _ = p.alloc.Apply(p.latest)
	exits := p.exits
	p.exits = nil
	terminating := p.terminating
	stop := p.stopReq
	results := p.probeResults
	p.probeResults = nil
	p.mu.Unlock()
	for _, r := range results {
		p.applyProbe(r)
	}
	if stop != nil && p.failure == nil {
		p.stopAll(context.Background(), stop.Grace)
		p.failure = stop
		p.finished = true
	}
	for _, e := range exits {
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
	return !terminating
}

// adopt rebuilds state from what the runtime still has of this pod (after a
// restart of hostlet), so nothing running is restarted.
func (p *Pod) adopt(ctx context.Context) {
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
	p.mu.Lock()
	resumed := p.resumed
	p.mu.Unlock()
	if resumed {
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
			p.startProbes(c, rec)
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

// sync moves the pod one step toward its spec and returns when it wants to
// run again (zero: only on an event).
func (p *Pod) sync(ctx context.Context) time.Time {
	if p.finished {
		return time.Time{}
	}
	now := p.clock.Now()
	if p.startTime.IsZero() {
		p.startTime = metav1.NewTime(now)
	}
	var deadline time.Time
	if d := p.pod.Spec.ActiveDeadlineSeconds; d != nil {
		deadline = p.startTime.Add(time.Duration(*d) * time.Second)
		if !now.Before(deadline) {
			p.exceedDeadline(ctx)
			return time.Time{}
		}
	}
	if !p.sandboxOK || !p.cfg.Runtime.SandboxReady(p.pod) {
		if p.sandboxOK {
			// The sandbox was lost: everything starts over in a new one, init
			// containers included, as the kubelet does.
			p.logger().Warn("pod sandbox lost; recreating")
			p.initialized, p.sandboxOK = false, false
			p.rerunInit()
		}
		if p.mainDone() || p.initFailed() {
			// Nothing of the pod is to run again (its containers exited
			// before a restart of hostlet): it gets no new sandbox and no
			// volumes, as the kubelet's computePodActions, and ends as it is.
			p.finish(ctx)
			return time.Time{}
		}
		if now.Before(p.sandboxRetry) {
			return p.sandboxRetry
		}
		ips, err := p.cfg.Runtime.PrepareSandbox(ctx, p.pod)
		if err != nil && ctx.Err() != nil {
			// Interrupted by the pod's deletion.
			return time.Time{}
		}
		if err != nil {
			reason, msg := "FailedCreatePodSandBox", "Failed to create pod sandbox: "+err.Error()
			var f *Failure
			if errors.As(err, &f) {
				reason, msg = f.Reason, f.Message
			}
			p.event("", v1.EventTypeWarning, reason, msg)
			p.sandboxDelay = sandboxRetry.next(p.sandboxDelay)
			if reason == NetworkNotReady {
				p.sandboxDelay = sandboxRetry.initial
			}
			p.sandboxRetry = now.Add(p.sandboxDelay)
			return p.sandboxRetry
		}
		p.podIPs, p.sandboxOK, p.sandboxDelay = ips, true, 0
		p.logger().WithField("ips", ips).Info("pod sandbox ready")
	}

	p.probeKills(ctx)

	var wakeAt time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (wakeAt.IsZero() || t.Before(wakeAt)) {
			wakeAt = t
		}
	}
	soonest(deadline)
	soonest(p.resize(ctx))
	soonest(p.startEphemeral(ctx))
	spec := &p.pod.Spec
	if !p.initialized {
		for i := range spec.InitContainers {
			c := &spec.InitContainers[i]
			rec := p.record(c.Name)
			if IsSidecar(c) {
				if !rec.cur.Running {
					soonest(p.ensureRunning(ctx, c, rec))
				}
				if !rec.cur.Running || !rec.started {
					// The next container waits for this one to be up and
					// through its startup probe, as with the kubelet.
					return wakeAt
				}
				continue
			}
			switch {
			case rec.cur.Running:
				return wakeAt
			case rec.rerun:
				soonest(p.ensureRunning(ctx, c, rec))
				return wakeAt
			case rec.cur.Exited && rec.cur.ExitCode == 0:
				continue
			case rec.cur.Exited && !ShouldRestart(c, spec, rec.cur.ExitCode):
				p.finish(ctx)
				return time.Time{}
			default:
				soonest(p.ensureRunning(ctx, c, rec))
				return wakeAt
			}
		}
		p.initialized = true
	} else {
		// After initialization only sidecars are kept running.
		for i := range spec.InitContainers {
			c := &spec.InitContainers[i]
			if rec := p.record(c.Name); IsSidecar(c) && !rec.cur.Running && !p.mainDone() {
				soonest(p.ensureRunning(ctx, c, rec))
			}
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		rec := p.record(c.Name)
		if rec.cur.Running || (rec.cur.Exited && !ShouldRestart(c, spec, rec.cur.ExitCode)) {
			continue
		}
		soonest(p.ensureRunning(ctx, c, rec))
	}
	if p.mainDone() {
		p.finish(ctx)
		return time.Time{}
	}
	return wakeAt
}

// mainDone reports that every main container exited for good.
func (p *Pod) mainDone() bool {
	spec := &p.pod.Spec
	for i := range spec.Containers {
		c := &spec.Containers[i]
		rec := p.containers[c.Name]
		if rec == nil || !rec.cur.Exited || ShouldRestart(c, spec, rec.cur.ExitCode) {
			return false
		}
	}
	return true
}

// initFailed reports that an init container failed for good, which ends
// the pod.
func (p *Pod) initFailed() bool {
	spec := &p.pod.Spec
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		rec := p.containers[c.Name]
		if !IsSidecar(c) && rec != nil && !rec.rerun && rec.cur.Exited && rec.cur.ExitCode != 0 && !ShouldRestart(c, spec, rec.cur.ExitCode) {
			return true
		}
	}
	return false
}

// ensureRunning starts or restarts a container unless it must wait (back-off
// or a retry); it returns when to come back.
func (p *Pod) ensureRunning(ctx context.Context, c *v1.Container, rec *container) time.Time {
	now := p.clock.Now()
	if rec.cur.Exited && rec.retryAt.IsZero() {
		// A fresh exit: the back-off decides when the restart may happen.
		var at time.Time
		var delay time.Duration
		if rec.probeKilled {
			at, delay = p.cfg.Backoff.afterProbeKill(&rec.bo, rec.prev, rec.cur, now)
		} else {
			at, delay = p.cfg.Backoff.next(&rec.bo, rec.cur.StartedAt, rec.cur.FinishedAt)
		}
		rec.retryAt, rec.retryDelay = at, delay
		p.logger().WithFields(log.Fields{"container": c.Name, "exitCode": rec.cur.ExitCode, "backoff": delay}).Info("container will be restarted")
		if err := p.cfg.Runtime.RecordBackoff(ctx, rec.cur.ID, delay, rec.bo.delay); err != nil {
			p.logger().WithError(err).Debug("recording back-off")
		}
	}
	if now.Before(rec.retryAt) {
		if rec.cur.Exited {
			msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
				rec.retryDelay, c.Name, p.pod.Name, p.pod.Namespace, p.pod.UID)
			if rec.waiting == nil || rec.waiting.Reason != "CrashLoopBackOff" {
				p.event(c.Name, v1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, p.pod.Name, p.pod.Namespace, p.pod.UID))
			}
			rec.waiting = &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: msg}
		} else if rec.waiting != nil && rec.waiting.Reason == "ErrImagePull" {
			img := c.Image
			if rec.pullImage != "" {
				img = rec.pullImage
			}
			p.event(c.Name, v1.EventTypeNormal, "BackOff", fmt.Sprintf("Back-off pulling image %q", img))
			rec.waiting = &v1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: fmt.Sprintf("Back-off pulling image %q: %s", img, rec.waiting.Message)}
		}
		return rec.retryAt
	}
	attempt := 0
	if rec.cur.ID != "" {
		attempt = rec.cur.Attempt + 1
	}
	info, err := p.cfg.Runtime.StartContainer(ctx, p.pod, c, attempt)
	if err != nil && ctx.Err() != nil {
		// Interrupted by the pod's deletion: the termination stops and
		// removes whatever was made.
		return time.Time{}
	}
	var failure *Failure
	if err != nil && !errors.As(err, &failure) {
		failure = &Failure{Reason: "RunContainerError", Message: err.Error()}
	}
	if failure != nil && failure.Info == nil {
		// Nothing was created: the container waits with the reason and the
		// start is retried (image pulls with their own back-off).
		p.event(c.Name, v1.EventTypeWarning, "Failed", "Error: "+failure.eventText())
		rec.waiting = &v1.ContainerStateWaiting{Reason: failure.Reason, Message: failure.Message}
		rec.pullImage = failure.Image
		rec.failures++
		rec.retryDelay = p.cfg.Backoff.startRetry(failure.Reason).next(rec.retryDelay)
		rec.retryAt = now.Add(rec.retryDelay)
		return rec.retryAt
	}
	if failure != nil {
		info = *failure.Info
		p.event(c.Name, v1.EventTypeWarning, "Failed", "Error: "+failure.Message)
	}
	if rec.cur.ID != "" {
		prev := rec.cur
		if rec.prev != nil && rec.prev.ID != "" {
			// One dead instance per container is kept, as the kubelet's GC does.
			if err := p.cfg.Runtime.RemoveContainer(ctx, rec.prev.ID); err != nil {
				p.logger().WithError(err).Warn("removing old container")
			}
		}
		rec.prev = &prev
	}
	rec.cur, rec.waiting, rec.retryAt, rec.failures, rec.probeKilled, rec.rerun = info, nil, time.Time{}, 0, false, false
	rec.actual, rec.actualFor = c.Resources.DeepCopy(), info.ID
	if failure != nil {
		p.logger().WithFields(log.Fields{"container": c.Name, "attempt": attempt, "reason": failure.Reason, "message": failure.Message}).Info("container failed to start")
	} else {
		p.logger().WithFields(log.Fields{"container": c.Name, "attempt": attempt}).Info("container started")
	}
	if failure == nil {
		rec.retryDelay = 0
		if p.postStart(ctx, c, rec) && rec.cur.Running {
			p.startProbes(c, rec)
		}
	}
	return time.Time{}
}

// publish computes the status and hands it on when it changed.
func (p *Pod) publish() {
	st := p.computeStatus()
	p.mu.Lock()
	prev := p.status
	if prev != nil && equality.Semantic.DeepEqual(prev.Status, st) {
		p.mu.Unlock()
		return
	}
	// The pod as the API has it, with its status: a resize not admitted
	// yet is not shown as undone.
	out := p.desired.DeepCopy()
	out.Status = st
	p.status = out
	p.mu.Unlock()
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

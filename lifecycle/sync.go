package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sync moves the pod one step toward its spec, in the order of the
// kubelet's SyncPod (computePodActions, then the actions): the active
// deadline, the sandbox, the containers to kill (probes), the resize, the
// ephemeral containers, the init containers and sidecars, the main
// containers. It returns when it wants to run again (zero: only on an
// event).
func (p *Pod) sync(ctx context.Context) time.Time {
	if p.finished {
		return time.Time{}
	}
	now := p.clock.Now()
	if p.startTime.IsZero() {
		p.startTime = metav1.NewTime(now)
	}
	deadline, exceeded := p.activeDeadline(now)
	if exceeded {
		p.exceedDeadline(ctx)
		return time.Time{}
	}
	if retry, ok := p.ensureSandbox(ctx, now); !ok {
		return retry
	}
	p.probeKills(ctx)
	p.definitionKills(ctx)
	var wake wakeup
	wake.at(deadline)
	wake.at(p.resize(ctx))
	wake.at(p.startEphemeral(ctx))
	switch p.syncInit(ctx, &wake) {
	case initWaiting:
		return wake.time
	case initFailure:
		p.finish(ctx)
		return time.Time{}
	}
	p.syncMain(ctx, &wake)
	if p.mainDone() {
		p.finish(ctx)
		return time.Time{}
	}
	return wake.time
}

// wakeup is when a sync wants to run again: the soonest of the times its
// steps asked for (zero: none).
type wakeup struct{ time time.Time }

func (w *wakeup) at(t time.Time) {
	if !t.IsZero() && (w.time.IsZero() || t.Before(w.time)) {
		w.time = t
	}
}

// activeDeadline is when activeDeadlineSeconds ends the pod (zero if it
// has none), and whether that is now.
func (p *Pod) activeDeadline(now time.Time) (deadline time.Time, exceeded bool) {
	d := p.pod.Spec.ActiveDeadlineSeconds
	if d == nil {
		return time.Time{}, false
	}
	deadline = p.startTime.Add(time.Duration(*d) * time.Second)
	return deadline, !now.Before(deadline)
}

// ensureSandbox makes sure the pod has an intact sandbox, making a new one
// (its back-off permitting) when it has none or lost it. It reports
// whether the sync goes on; if not, when to retry (zero: only on an event,
// as for a pod it finished).
func (p *Pod) ensureSandbox(ctx context.Context, now time.Time) (retry time.Time, ok bool) {
	if p.sandboxOK && p.cfg.Runtime.SandboxReady(p.pod) {
		return time.Time{}, true
	}
	if p.sandboxOK {
		// The sandbox was lost: everything starts over in a new one, init
		// containers included, as the kubelet does.
		p.logger().Warn("pod sandbox lost; recreating")
		p.initialized, p.sandboxOK = false, false
		p.rerunInit()
	}
	if p.anyRunning() {
		// Containers still running in a sandbox that is gone or not whole
		// (so found after a restart of hostlet) are stopped before a new
		// one is made, as the kubelet's SyncPod kills a pod whose sandbox
		// changed; they start again in the new one.
		p.logger().Warn("pod sandbox not ready; stopping its containers")
		p.stopAll(ctx, p.specGrace())
		p.stopping = false
	}
	if p.mainDone() || p.initFailed() {
		// Nothing of the pod is to run again (its containers exited
		// before a restart of hostlet): it gets no new sandbox and no
		// volumes, as the kubelet's computePodActions, and ends as it is.
		p.finish(ctx)
		return time.Time{}, false
	}
	if now.Before(p.sandboxRetry) {
		return p.sandboxRetry, false
	}
	ips, err := p.cfg.Runtime.PrepareSandbox(ctx, p.pod)
	if err != nil && ctx.Err() != nil {
		// Interrupted by the pod's deletion.
		return time.Time{}, false
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
		return p.sandboxRetry, false
	}
	p.podIPs, p.sandboxOK, p.sandboxDelay = ips, true, 0
	p.logger().WithField("ips", ips).Info("pod sandbox ready")
	return time.Time{}, true
}

// initStep is where the init containers leave a sync.
type initStep int

const (
	// initDone: the pod is initialized; the main containers are synced.
	initDone initStep = iota
	// initWaiting: an init container or sidecar runs, restarts or is not
	// started yet; the next ones wait.
	initWaiting
	// initFailure: an init container failed for good; the pod ends.
	initFailure
)

// syncInit runs the init containers in order, each to completion, and the
// sidecars among them until they are up and started, as the kubelet does;
// once the pod is initialized it keeps only the sidecars running.
func (p *Pod) syncInit(ctx context.Context, wake *wakeup) initStep {
	spec := &p.pod.Spec
	if p.initialized {
		for i := range spec.InitContainers {
			c := &spec.InitContainers[i]
			if rec := p.record(c.Name); IsSidecar(c) && !rec.cur.Running && !p.mainDone() {
				wake.at(p.ensureRunning(ctx, c, rec))
			}
		}
		return initDone
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		rec := p.record(c.Name)
		if IsSidecar(c) {
			if !rec.cur.Running {
				wake.at(p.ensureRunning(ctx, c, rec))
			}
			if !rec.cur.Running || !rec.started {
				// The next container waits for this one to be up and
				// through its startup probe, as with the kubelet.
				return initWaiting
			}
			continue
		}
		switch {
		case rec.cur.Running:
			return initWaiting
		case rec.rerun:
			wake.at(p.ensureRunning(ctx, c, rec))
			return initWaiting
		case rec.cur.Exited && rec.cur.ExitCode == 0:
			continue
		case rec.cur.Exited && !ShouldRestart(c, spec, rec.cur.ExitCode):
			return initFailure
		default:
			wake.at(p.ensureRunning(ctx, c, rec))
			return initWaiting
		}
	}
	p.initialized = true
	return initDone
}

// syncMain starts the main containers not running, and restarts those
// that exited and are to restart (each with its back-off).
func (p *Pod) syncMain(ctx context.Context, wake *wakeup) {
	spec := &p.pod.Spec
	for i := range spec.Containers {
		c := &spec.Containers[i]
		rec := p.record(c.Name)
		if rec.cur.Running || (rec.cur.Exited && !rec.restartKilled && !ShouldRestart(c, spec, rec.cur.ExitCode)) {
			continue
		}
		wake.at(p.ensureRunning(ctx, c, rec))
	}
}

// anyRunning reports a container of the pod running.
func (p *Pod) anyRunning() bool {
	for _, rec := range p.containers {
		if rec.cur.Running {
			return true
		}
	}
	return false
}

// mainDone reports that every main container exited for good.
func (p *Pod) mainDone() bool {
	spec := &p.pod.Spec
	for i := range spec.Containers {
		c := &spec.Containers[i]
		rec := p.containers[c.Name]
		if rec == nil || !rec.cur.Exited || rec.restartKilled || ShouldRestart(c, spec, rec.cur.ExitCode) {
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
	if rec.cur.Exited && rec.cur.Image != "" && rec.cur.Image != c.Image {
		// The kubelet's back-off is keyed by the container's hash: a new
		// definition (image) starts at once, its back-off anew.
		rec.bo, rec.retryAt, rec.retryDelay = backoffState{}, time.Time{}, 0
	}
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
		if rec.cur.Exited || rec.crashLoop {
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
	attempt := rec.nextAttempt
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
		// start is retried, image pulls with their own back-off, a process
		// that could not run with the crash loop's.
		p.event(c.Name, v1.EventTypeWarning, "Failed", "Error: "+failure.eventText())
		rec.waiting = &v1.ContainerStateWaiting{Reason: failure.Reason, Message: failure.Message}
		rec.pullImage = failure.Image
		rec.failures++
		rec.crashLoop = crashLoops(failure.Reason)
		if rec.crashLoop {
			rec.retryAt, rec.retryDelay = p.cfg.Backoff.next(&rec.bo, time.Time{}, now)
			p.logger().WithFields(log.Fields{"container": c.Name, "reason": failure.Reason, "message": failure.Message, "backoff": rec.retryDelay}).Info("container failed to run; it will be retried")
			return rec.retryAt
		}
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
	rec.cur, rec.waiting, rec.retryAt, rec.failures, rec.probeKilled, rec.rerun, rec.crashLoop, rec.restartKilled = info, nil, time.Time{}, 0, false, false, false, false
	rec.actual, rec.actualFor = c.Resources.DeepCopy(), info.ID
	if failure != nil {
		// It exited without running (StartError): the next sync, at once,
		// gives it the crash-loop back-off of any exit, as no exit event
		// may follow for a process that never started.
		p.logger().WithFields(log.Fields{"container": c.Name, "attempt": attempt, "reason": failure.Reason, "message": failure.Message}).Info("container failed to start")
		return now
	}
	p.logger().WithFields(log.Fields{"container": c.Name, "attempt": attempt}).Info("container started")
	rec.retryDelay = 0
	if p.postStart(ctx, c, rec) && rec.cur.Running {
		p.startProbes(c, rec, false)
	}
	return time.Time{}
}

package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

// minGrace is what a container gets at least after its preStop hook or its
// turn used up the grace period: the kubelet's one-time 2 s extension.
const minGrace = 2 * time.Second

func (p *Pod) specGrace() time.Duration {
	if g := p.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// terminate runs the deletion of the pod and hands the final status to
// Terminated.
func (p *Pod) terminate(ctx context.Context) {
	ctx, span := p.startSpan(ctx, "syncTerminatingPod")
	defer span.End()
	grace := p.specGrace()
	if g := p.pod.DeletionGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if p.resumed && p.pod.DeletionTimestamp != nil {
		// The deletion began before this worker: only what is left of its
		// grace period remains (the deletion timestamp is when it ends).
		if left := p.pod.DeletionTimestamp.Sub(p.clock.Now()); left < grace {
			grace = max(left, 0)
		}
	}
	p.logger().WithField("grace", grace).Info("pod termination begun")
	p.stopAll(ctx, grace)
	p.finished = true
	p.publish()
	if p.cfg.Terminated != nil {
		p.cfg.Terminated(p.Status())
	}
}

// finish ends a pod whose main containers are done for good: what still
// runs (sidecars) is stopped in order and the network released. Exited
// containers stay for their logs.
func (p *Pod) finish(ctx context.Context) {
	p.stopAll(ctx, p.specGrace())
	p.finished = true
	p.logger().Info("pod finished; sandbox released")
}

// exceedDeadline fails a pod that ran longer than activeDeadlineSeconds, as
// the kubelet does: its containers are stopped and it ends Failed.
func (p *Pod) exceedDeadline(ctx context.Context) {
	const msg = "Pod was active on the node longer than the specified deadline"
	p.event("", v1.EventTypeWarning, "DeadlineExceeded", msg)
	p.stopAll(ctx, p.specGrace())
	p.failure = &StopRequest{Reason: "DeadlineExceeded", Message: msg}
	p.finished = true
}

// stopAll stops every running container of the pod as the kubelet's
// termination does: all at once, each running its preStop hook first;
// sidecars then wait until the main containers have exited and, in reverse
// order of definition, the sidecars after them. Readiness drops at the start.
func (p *Pod) stopAll(ctx context.Context, grace time.Duration) {
	p.stopping = true
	p.publish()
	deadline := p.clock.Now().Add(grace)
	spec := &p.pod.Spec
	var main, all sync.WaitGroup
	// Ephemeral containers stop with the main containers.
	var regular []*v1.Container
	for i := range spec.Containers {
		regular = append(regular, &spec.Containers[i])
	}
	regular = append(regular, ephemeralContainers(spec)...)
	for _, c := range regular {
		if rec := p.containers[c.Name]; rec != nil && rec.cur.Running {
			main.Add(1)
			all.Add(1)
			go func() {
				defer all.Done()
				defer main.Done()
				defer crash.Recover(p.killFailed(c))
				p.kill(ctx, c, rec, deadline, "", nil)
			}()
		}
	}
	// Sidecars in reverse: each waits for the main containers and for the
	// sidecar defined after it.
	var after chan struct{}
	for i := len(spec.InitContainers) - 1; i >= 0; i-- {
		c := &spec.InitContainers[i]
		rec := p.containers[c.Name]
		if rec == nil || !rec.cur.Running {
			continue
		}
		all.Add(1)
		done := make(chan struct{})
		if !IsSidecar(c) {
			go func() {
				defer all.Done()
				defer close(done)
				defer crash.Recover(p.killFailed(c))
				p.kill(ctx, c, rec, deadline, "", nil)
			}()
			continue
		}
		prev := after
		go func() {
			defer all.Done()
			defer close(done)
			defer crash.Recover(p.killFailed(c))
			p.kill(ctx, c, rec, deadline, "", func() {
				main.Wait()
				if prev != nil {
					<-prev
				}
			})
		}()
		after = done
	}
	all.Wait()
	p.stopProbes()
	if p.sandboxOK {
		if err := p.cfg.Runtime.TeardownSandbox(ctx, p.pod); err != nil {
			p.logger().WithError(err).Warn("tearing down sandbox")
		}
		p.sandboxOK = false
	}
}

// kill stops one container by deadline: Killing event, preStop hook, its
// turn (sidecars), then the stop signal and SIGKILL at the end of the grace
// period, never with less than minGrace.
func (p *Pod) kill(ctx context.Context, c *v1.Container, rec *container, deadline time.Time, message string, waitTurn func()) {
	if message == "" {
		message = "Stopping container " + c.Name
	}
	p.event(c.Name, v1.EventTypeNormal, "Killing", message)
	id := rec.cur.ID
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && deadline.After(p.clock.Now()) {
		// A hook still running at the deadline goes on until the
		// container is stopped (its processes with it), as the kubelet
		// only stops waiting for it.
		defer p.runPreStop(ctx, c, id, deadline)()
	}
	if waitTurn != nil {
		turn := make(chan struct{})
		go func() { defer close(turn); defer crash.Recover(PodLogger(p.pod), nil); waitTurn() }()
		select {
		case <-turn:
		case <-p.at(deadline):
		}
	}
	grace := deadline.Sub(p.clock.Now())
	if grace < minGrace {
		grace = minGrace
	}
	if err := p.cfg.Runtime.StopContainer(ctx, p.pod, c, id, grace); err != nil {
		p.logger().WithError(err).WithField("container", c.Name).Warn("stopping container")
	}
	if info, err := p.cfg.Runtime.Container(ctx, id); err == nil {
		rec.cur = info
		p.logger().WithFields(log.Fields{"container": c.Name, "exitCode": info.ExitCode}).Info("container stopped")
	}
}

// runPreStop runs the preStop hook until it returns or the grace period ends.
//
// It returns when the hook does or at the deadline, with what ends a hook
// still running: called once its container is stopped.
func (p *Pod) runPreStop(ctx context.Context, c *v1.Container, id string, deadline time.Time) (cancel func()) {
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := guardHook(p.pod, func() (string, error) {
			return p.cfg.Prober.Hook(hctx, c.Lifecycle.PreStop, p.target(c, id), p.pod)
		})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			// The message is not recorded so secrets cannot leak, as the kubelet does.
			p.event(c.Name, v1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
		}
	case <-p.at(deadline):
	case <-ctx.Done():
	}
	return cancel
}

// at fires at t on the pod's clock, at once if t has passed.
func (p *Pod) at(t time.Time) <-chan time.Time {
	if d := t.Sub(p.clock.Now()); d > 0 {
		return p.clock.After(d)
	}
	ch := make(chan time.Time, 1)
	ch <- t
	return ch
}

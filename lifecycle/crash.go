package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/probes"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// PodLogger is the logger of one pod's story (fields as the provider's).
func PodLogger(pod *v1.Pod) *log.Entry {
	if pod == nil {
		return log.NewEntry(log.StandardLogger())
	}
	return log.WithFields(log.Fields{"pod": pod.Namespace + "/" + pod.Name, "uid": string(pod.UID)})
}

// Supervise runs the worker (Run) and survives its panics: a panic costs
// this pod its sync, not the node. It is logged with the stack, reported on
// the pod as a FailedSync event, and the worker starts over after a back-off
// (1 s doubling to 30 s), rebuilding its state from the runtime as after a
// restart of hostlet, so nothing running is restarted.
func (p *Pod) Supervise(ctx context.Context) {
	var delay time.Duration
	for {
		start := p.clock.Now()
		if !p.runGuarded(ctx) || ctx.Err() != nil {
			return
		}
		if p.clock.Since(start) > 5*time.Minute {
			delay = 0 // a rare panic does not inherit an old back-off
		}
		delay = sandboxRetry.next(delay)
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(delay):
		}
		// Adoption rebuilds the records of the containers; stale ones would
		// show an instance as its own predecessor.
		p.containers = map[string]*container{}
	}
}

// runGuarded runs the worker once and reports whether it panicked.
func (p *Pod) runGuarded(ctx context.Context) (panicked bool) {
	pod := p.Object()
	defer crash.Recover(PodLogger(pod), func(msg string) {
		panicked = true
		p.ensureUnlocked(PodLogger(pod))
		if p.cfg.Recorder != nil {
			p.cfg.Recorder.Event(p.Object(), "", v1.EventTypeWarning, "FailedSync", "Error syncing pod, will retry: panic: "+msg)
		}
	})
	p.Run(ctx)
	return false
}

// guardHook runs a lifecycle hook; a panic in it is the hook's failure.
func guardHook(pod *v1.Pod, run func() (string, error)) (msg string, err error) {
	defer crash.Recover(PodLogger(pod), func(m string) {
		msg, err = "", errors.New("panic: "+m)
	})
	return run()
}

// probePanicked reports a recovered panic of a probe worker on the
// container, as the kubelet words a probe that errored.
func (p *Pod) probePanicked(l *log.Entry, event func(eventType, reason, msg string)) func(kind probes.Kind, msg string) {
	return func(kind probes.Kind, msg string) {
		p.ensureUnlocked(l)
		event(v1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe errored and resulted in unknown state: panic: %s", kind, msg))
	}
}

// killFailed reports a recovered panic in a goroutine that stops one
// container as a failure to kill (the kubelet's FailedKillPod); the other
// containers of the pod still stop. Use: defer crash.Recover(p.killFailed(c)).
func (p *Pod) killFailed(c *v1.Container) (*log.Entry, func(string)) {
	l := PodLogger(p.pod).WithField("container", c.Name)
	return l, func(msg string) {
		p.ensureUnlocked(l)
		p.event(c.Name, v1.EventTypeWarning, "FailedKillPod", "error killing pod: panic: "+msg)
	}
}

// ensureUnlocked makes sure a recovered panic did not abandon the pod's
// lock. Its holders keep it for moments, so a lock still held after a
// second was left by the panic: every reader of the pod would hang on it,
// and hostlet exits instead, as it would have without the recovery (and
// adopts its pods when it starts again).
func (p *Pod) ensureUnlocked(l *log.Entry) {
	// Real time, not the pod's clock: this waits for other goroutines.
	wall := clock.RealClock{}
	deadline := wall.Now().Add(time.Second)
	for !p.shared.mu.TryLock() {
		if wall.Now().After(deadline) {
			l.Fatal("a panic left the pod's state locked; exiting")
			return // only when a test replaced logrus's exit
		}
		wall.Sleep(10 * time.Millisecond)
	}
	p.shared.mu.Unlock()
}

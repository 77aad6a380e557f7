package provider

import (
	"context"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's volume manager retries a failed unmount after 500ms,
// doubling up to 2m2s (pkg/util/goroutinemap/exponentialbackoff).
const (
	teardownInitialBackoff = 500 * time.Millisecond
	teardownMaxBackoff     = 2*time.Minute + 2*time.Second
)

// reasonFailedUnmount is the warning a pod gets while its volumes resist
// teardown. The kubelet only logs "UnmountVolume.TearDown failed for
// volume ..." (its unmount operations have no event recorder); hostlet
// also records it on the pod so a pod held Terminating says why.
const reasonFailedUnmount = "FailedUnmount"

// teardownBackoff is the kubelet's exponential back-off between attempts.
type teardownBackoff struct{ d time.Duration }

func (b *teardownBackoff) next() time.Duration {
	switch {
	case b.d == 0:
		b.d = teardownInitialBackoff
	case b.d < teardownMaxBackoff:
		b.d = min(2*b.d, teardownMaxBackoff)
	}
	return b.d
}

// tearDown cleans a pod off the host (podspec's Cleanup: containers,
// sandbox, volumes, logs) until its volumes are torn down, retrying a
// failure with back-off and a warning event, as the kubelet's volume
// manager retries an unmount; the pod's API object is deleted only after
// this returns nil (the kubelet's canBeDeleted waits for
// PodResourcesAreReclaimed). One teardown runs per pod: a second caller
// waits for the first. It returns early only when ctx ends (hostlet
// stopping): the orphan sweep of the next start finishes it.
func (p *Provider) tearDown(ctx context.Context, uid types.UID, namespace, name string) error {
	p.teardownMu.Lock()
	if running, ok := p.teardowns[uid]; ok {
		p.teardownMu.Unlock()
		select {
		case <-running:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	p.teardowns[uid] = done
	p.teardownMu.Unlock()
	defer func() {
		p.teardownMu.Lock()
		delete(p.teardowns, uid)
		p.teardownMu.Unlock()
		close(done)
	}()
	l := log.WithFields(log.Fields{"pod": key(namespace, name), "uid": uid})
	var b teardownBackoff
	for {
		err := p.host.Cleanup(context.WithoutCancel(ctx), string(uid), namespace, name)
		if err == nil {
			return nil
		}
		wait := b.next()
		l.WithError(err).WithField("retryIn", wait).Warn("pod volumes not torn down; retrying")
		if namespace != "" && p.events != nil {
			p.events.Event(podRefObject(uid, namespace, name), "", v1.EventTypeWarning, reasonFailedUnmount, err.Error())
		}
		select {
		case <-p.clock.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tearDownInBackground starts a pod's teardown unless one is under way
// (the sweep's: it does not wait for a pod's retries).
func (p *Provider) tearDownInBackground(uid types.UID, namespace, name string) {
	if p.tearingDown(uid) {
		return
	}
	p.cleanups.Add(1)
	go func() {
		defer p.cleanups.Done()
		// A panic costs this pod's teardown (the sweep retries it), not the node.
		defer crash.Recover(log.WithFields(log.Fields{"pod": key(namespace, name), "uid": uid}), nil)
		_ = p.tearDown(p.ctx, uid, namespace, name)
	}()
}

// podRefObject is enough of a pod for an event about it when only its
// identity is known (a pod gone from the API).
func podRefObject(uid types.UID, namespace, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Namespace: namespace, Name: name}}
}

// tearingDown: a teardown of the pod is under way.
func (p *Provider) tearingDown(uid types.UID) bool {
	p.teardownMu.Lock()
	defer p.teardownMu.Unlock()
	_, ok := p.teardowns[uid]
	return ok
}

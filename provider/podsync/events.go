package podsync

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// events holds, per pod UID, the newest thing the API said about it (an
// object, or its removal) until a worker hands it to the node: changes
// that come faster than they are handled coalesce, and a pod is handled by
// one goroutine at a time. Keyed by UID, a pod recreated under a reused
// name is a pod of its own from its first event.
type events struct {
	queue  workqueue.TypedRateLimitingInterface[types.UID]
	mu     sync.Mutex
	latest map[types.UID]event
	inHand func() (done func())
}

type event struct {
	pod     *v1.Pod
	removed bool
}

func newEvents(inHand func() func()) *events {
	if inHand == nil {
		inHand = func() func() { return func() {} }
	}
	return &events{queue: newQueue("pods"), latest: map[types.UID]event{}, inHand: inHand}
}

func (e *events) changed(pod *v1.Pod) { e.put(event{pod: pod}) }

func (e *events) removed(pod *v1.Pod) { e.put(event{pod: pod, removed: true}) }

func (e *events) put(ev event) {
	e.mu.Lock()
	// A removal is final: a late change of the same pod does not undo it.
	if prev, ok := e.latest[ev.pod.UID]; !ok || !prev.removed {
		e.latest[ev.pod.UID] = ev
	}
	e.mu.Unlock()
	e.queue.Add(ev.pod.UID)
}

// take removes the pod's newest event; ok is false if it was handled.
func (e *events) take(uid types.UID) (event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev, ok := e.latest[uid]
	delete(e.latest, uid)
	return ev, ok
}

// retake puts back an event whose handling failed, unless a newer one came.
func (e *events) retake(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, newer := e.latest[ev.pod.UID]; !newer {
		e.latest[ev.pod.UID] = ev
	}
}

func (e *events) run(ctx context.Context, pods Pods) {
	process(e.queue, "handling a pod event", func(uid types.UID) error {
		ev, ok := e.take(uid)
		if !ok {
			return nil
		}
		err := e.dispatch(ctx, pods, ev)
		if err != nil {
			e.retake(ev)
		}
		return err
	})
}

func (e *events) dispatch(ctx context.Context, pods Pods, ev event) error {
	// Deferred: a handler's panic (recovered by process) is not in hand.
	defer e.inHand()()
	// The object stays the informer's: the node copies what it keeps and
	// changes (provider.SyncPod).
	if ev.removed {
		return pods.RemovePod(ctx, ev.pod)
	}
	return pods.SyncPod(ctx, ev.pod)
}

package podsync

import (
	"context"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testPod(name string, uid types.UID, rv string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, ResourceVersion: rv}}
}

type recorded struct {
	mu      sync.Mutex
	synced  []string
	removed []string
}

func (r *recorded) SyncPod(_ context.Context, pod *v1.Pod) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced = append(r.synced, string(pod.UID)+"@"+pod.ResourceVersion)
	return nil
}

func (r *recorded) RemovePod(_ context.Context, pod *v1.Pod) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, string(pod.UID))
	return nil
}

// handleAll hands every queued pod to pods, one at a time, as a worker.
func handleAll(t *testing.T, e *events, pods Pods) {
	t.Helper()
	for e.queue.Len() > 0 {
		uid, _ := e.queue.Get()
		if ev, ok := e.take(uid); ok {
			if err := e.dispatch(context.Background(), pods, ev); err != nil {
				t.Fatal(err)
			}
		}
		e.queue.Done(uid)
	}
}

// Changes coalesce per UID (the newest object wins), and a pod recreated
// under its name is a pod of its own: the old one's removal and the new
// one's creation are both handed over.
func TestEventsByUID(t *testing.T) {
	e := newEvents(nil)
	defer e.queue.ShutDown()
	e.changed(testPod("web-0", "old", "1"))
	e.changed(testPod("web-0", "old", "2"))
	e.removed(testPod("web-0", "old", "3"))
	e.changed(testPod("web-0", "old", "4")) // late: the removal stands
	e.changed(testPod("web-0", "new", "5"))
	var r recorded
	handleAll(t, e, &r)
	if len(r.synced) != 1 || r.synced[0] != "new@5" {
		t.Fatalf("synced %v, want only new@5", r.synced)
	}
	if len(r.removed) != 1 || r.removed[0] != "old" {
		t.Fatalf("removed %v, want old", r.removed)
	}
}

// A failed event is kept for its retry unless a newer one came meanwhile.
func TestEventsRetake(t *testing.T) {
	e := newEvents(nil)
	defer e.queue.ShutDown()
	e.changed(testPod("p", "u", "1"))
	ev, _ := e.take("u")
	e.retake(ev)
	if got, _ := e.take("u"); got.pod.ResourceVersion != "1" {
		t.Fatalf("retaken event = %v", got.pod.ResourceVersion)
	}
	e.changed(testPod("p", "u", "2"))
	e.retake(ev)
	if got, _ := e.take("u"); got.pod.ResourceVersion != "2" {
		t.Fatalf("a retake replaced a newer event: %v", got.pod.ResourceVersion)
	}
}

// A panic while one pod is handled is that pod's failure: it is retried
// with its back-off, and the goroutine goes on.
func TestProcessRecoversAPanic(t *testing.T) {
	q := newQueue("test")
	calls := make(chan int, 3)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		process(q, "testing", func(types.UID) error {
			n++
			calls <- n
			if n == 1 {
				panic("bug")
			}
			return nil
		})
	}()
	q.Add("uid")
	if <-calls != 1 || <-calls != 2 {
		t.Fatal("the pod was not handled again after a panic")
	}
	q.ShutDown()
	<-done
}

type panicking struct{}

func (panicking) SyncPod(context.Context, *v1.Pod) error   { panic("bug") }
func (panicking) RemovePod(context.Context, *v1.Pod) error { return nil }

// Each handoff is in hand (the syncloop health check) until the node
// returns, or panics.
func TestEventsInHand(t *testing.T) {
	inHand := 0
	e := newEvents(func() func() {
		inHand++
		return func() { inHand-- }
	})
	defer e.queue.ShutDown()
	e.changed(testPod("p", "u", "1"))
	var r recorded
	handleAll(t, e, &r)
	if inHand != 0 || len(r.synced) != 1 {
		t.Fatalf("in hand %d after the handoff, synced %v", inHand, r.synced)
	}
	ev := event{pod: testPod("p", "u", "2")}
	if err := handleRecovered("u", "testing", func(types.UID) error { return e.dispatch(context.Background(), panicking{}, ev) }); err == nil {
		t.Fatal("the panic was not an error")
	}
	if inHand != 0 {
		t.Fatalf("in hand %d after a panic", inHand)
	}
}

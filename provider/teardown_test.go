package provider

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// The kubelet's volume manager back-off: 500ms, doubled each failure, at
// most 2m2s.
func TestTeardownBackoff(t *testing.T) {
	var b teardownBackoff
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 122 * time.Second, 122 * time.Second}
	for i, w := range want {
		if got := b.next(); got != w {
			t.Fatalf("wait %d = %v, want %v", i, got, w)
		}
	}
}

// failingHost's Cleanup fails its first failures calls: a volume that
// does not unmount yet.
type failingHost struct {
	Host
	mu       sync.Mutex
	failures int
	calls    int
}

func (h *failingHost) Cleanup(context.Context, string, string, string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.calls <= h.failures {
		return errors.New(`UnmountVolume.TearDown failed for volume "data" (pod "u1"): rpc error: code = Internal desc = busy`)
	}
	return nil
}

func (h *failingHost) attempts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (r *eventLog) Event(pod *v1.Pod, container, eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, eventType+" "+reason+" "+pod.Namespace+"/"+pod.Name+" "+message)
}

func (r *eventLog) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// A deleted pod's object stays in the API (Terminating) while its volumes
// resist teardown, each failure retried after the kubelet's back-off with
// a warning event; it is deleted with grace 0 once the teardown succeeds.
func TestTerminatedDeletesOnlyAfterTeardown(t *testing.T) {
	pod := registryPod("web-0", "u1")
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	client := fake.NewClientset(pod)
	fc := clocktesting.NewFakeClock(time.Now())
	host := &failingHost{failures: 2}
	events := &eventLog{}
	p, _ := testRegistry(t)
	p.client, p.host, p.events, p.clock = client, host, events, fc
	p.register(pod)

	done := make(chan struct{})
	go func() {
		defer close(done)
		p.terminated(pod)
	}()
	inAPI := func() bool {
		_, err := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for i, wait := range []time.Duration{500 * time.Millisecond, time.Second} {
		for !fc.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		if got := host.attempts(); got != i+1 {
			t.Fatalf("attempts before wait %d = %d", i, got)
		}
		if !inAPI() {
			t.Fatalf("pod deleted from the API while its volumes are not torn down")
		}
		if got := events.count(); got != i+1 {
			t.Fatalf("events after %d failures = %d (%v)", i+1, got, events.events)
		}
		// Not retried before its back-off is over.
		fc.Step(wait - time.Millisecond)
		if host.attempts() != i+1 {
			t.Fatalf("retried before %v", wait)
		}
		fc.Step(time.Millisecond)
	}
	<-done
	if got := host.attempts(); got != 3 {
		t.Fatalf("attempts = %d, want 3", got)
	}
	if inAPI() {
		t.Fatal("pod still in the API after its teardown succeeded")
	}
	want := `Warning FailedUnmount ns/web-0 UnmountVolume.TearDown failed for volume "data" (pod "u1"): rpc error: code = Internal desc = busy`
	if events.events[0] != want {
		t.Fatalf("event = %q, want %q", events.events[0], want)
	}
	if p.entry("u1") != nil || p.tearingDown("u1") {
		t.Fatal("pod still registered or tearing down")
	}
}

// A pod removed from the API another way (force deletion) while its
// volumes resist is retried the same way, once: a second removal or the
// sweep does not start another teardown.
func TestRemovedPodTeardownRetried(t *testing.T) {
	p, _ := testRegistry(t)
	fc := clocktesting.NewFakeClock(time.Now())
	host := &failingHost{failures: 1}
	p.host, p.events, p.clock = host, &eventLog{}, fc
	pod := registryPod("job-x", "u2")
	if err := p.RemovePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	for !fc.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	if !p.tearingDown(types.UID("u2")) {
		t.Fatal("teardown not under way")
	}
	p.tearDownInBackground("u2", "ns", "job-x") // the sweep's: a no-op now
	fc.Step(teardownInitialBackoff)
	p.cleanups.Wait()
	if got := host.attempts(); got != 2 {
		t.Fatalf("attempts = %d, want 2", got)
	}
}

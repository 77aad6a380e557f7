package join

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// lines is the waiter's output, handed to the test line by line so it can
// act once the waiter has seen something.
type lines struct {
	mu  sync.Mutex
	all strings.Builder
	ch  chan string
}

func newLines() *lines { return &lines{ch: make(chan string, 100)} }

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.all.Write(b)
	l.mu.Unlock()
	for _, s := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		l.ch <- s
	}
	return len(b), nil
}

// await reads lines until one contains want.
func (l *lines) await(t *testing.T, want string) {
	t.Helper()
	for s := range l.ch {
		if strings.Contains(s, want) {
			return
		}
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// watching is closed once the fake clientset served a watch of nodes:
// before that, a change would be lost between list and watch.
func watching(client *fake.Clientset) <-chan struct{} {
	started := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(started) })
		return true, w, err
	})
	return started
}

func nodeWith(ready v1.ConditionStatus, reason, msg string, heartbeat time.Time) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse},
		{Type: v1.NodeReady, Status: ready, Reason: reason, Message: msg, LastHeartbeatTime: metav1.NewTime(heartbeat)},
	}}}
}

type waitRun struct {
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	out    *lines
	done   chan error
}

// startWait runs a wait for node n1 of 2 minutes, restarted at the fake
// clock's now, with the given nodes in the API.
func startWait(t *testing.T, nodes ...*v1.Node) *waitRun {
	t.Helper()
	client := fake.NewClientset()
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := &waitRun{client: client, clock: clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)), out: newLines(), done: make(chan error, 1)}
	started := watching(client)
	w := readyWait{client: client, clock: r.clock, node: "n1", timeout: 2 * time.Minute, out: r.out,
		logs: func() string { return "hostlet[42]: failed to start: containerd is not running" }}
	since := r.clock.Now()
	go func() { r.done <- w.wait(context.Background(), since) }()
	<-started
	return r
}

// timeout steps the fake clock past the wait's timeout.
func (r *waitRun) timeout(t *testing.T) error {
	t.Helper()
	// The timer is set before the watch starts, and startWait saw that.
	if !r.clock.HasWaiters() {
		t.Fatal("the wait has no timer on its clock")
	}
	r.clock.Step(2*time.Minute + time.Second)
	return <-r.done
}

func TestWaitReadyRegisteredThenReady(t *testing.T) {
	r := startWait(t)
	now := r.clock.Now()
	nodes := r.client.CoreV1().Nodes()
	if _, err := nodes.Create(context.Background(), nodeWith(v1.ConditionFalse, "KubeletNotReady", "container runtime network not ready", now), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.out.await(t, "Ready=False (KubeletNotReady): container runtime network not ready")
	if _, err := nodes.Update(context.Background(), nodeWith(v1.ConditionTrue, "KubeletReady", "", now), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-r.done; err != nil {
		t.Fatalf("wait: %v\n%s", err, r.out)
	}
	out := r.out.String()
	for _, want := range []string{"Waiting up to 2m0s for node n1", "node n1 is registered", "node n1: Ready\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A Node Ready in a status from before the restart is not the new
// hostlet's; a heartbeat within the restart's second is (the API keeps
// seconds).
func TestWaitReadyNeedsStatusSinceRestart(t *testing.T) {
	r := startWait(t, nodeWith(v1.ConditionTrue, "KubeletReady", "", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)))
	r.out.await(t, "from before hostlet's restart")
	fresh := r.clock.Now().Truncate(time.Second)
	if _, err := r.client.CoreV1().Nodes().Update(context.Background(), nodeWith(v1.ConditionTrue, "KubeletReady", "", fresh), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-r.done; err != nil {
		t.Fatalf("wait: %v\n%s", err, r.out)
	}
}

func TestWaitReadyTimesOut(t *testing.T) {
	t.Run("not Ready", func(t *testing.T) {
		r := startWait(t, nodeWith(v1.ConditionFalse, "KubeletNotReady", "PLEG is not healthy", time.Time{}))
		r.out.await(t, "PLEG is not healthy")
		err := r.timeout(t)
		if err == nil {
			t.Fatal("no error when the node never became Ready")
		}
		for _, want := range []string{"node n1 is not Ready after 2m0s: Ready=False (KubeletNotReady): PLEG is not healthy",
			"journalctl -u hostlet.service -n 40 --no-pager", "containerd is not running", "systemctl restart hostlet.service"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})
	t.Run("never registered", func(t *testing.T) {
		r := startWait(t)
		err := r.timeout(t)
		if err == nil || !strings.Contains(err.Error(), "node n1 was not registered within 2m0s") || !strings.Contains(err.Error(), "containerd is not running") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("stale Ready", func(t *testing.T) {
		r := startWait(t, nodeWith(v1.ConditionTrue, "KubeletReady", "", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)))
		r.out.await(t, "from before hostlet's restart")
		if err := r.timeout(t); err == nil || !strings.Contains(err.Error(), "is not Ready after 2m0s: Ready in a status from before hostlet's restart") {
			t.Fatalf("got %v", err)
		}
	})
}

// The user's interrupt ends the wait with the context's error, not a
// diagnosis.
func TestWaitReadyCancelled(t *testing.T) {
	client := fake.NewClientset()
	started := watching(client)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := readyWait{client: client, clock: clocktesting.NewFakeClock(time.Now()), node: "n1", timeout: time.Minute, out: newLines()}
	go func() { done <- w.wait(ctx, time.Now()) }()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

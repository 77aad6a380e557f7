package lifecycle

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// panicRuntime panics in the first StartContainer, then runs containers.
type panicRuntime struct {
	mu     sync.Mutex
	starts int
}

func (r *panicRuntime) PrepareSandbox(context.Context, *v1.Pod) ([]string, error) {
	return []string{"10.0.0.2"}, nil
}
func (r *panicRuntime) SandboxReady(*v1.Pod) bool                      { return true }
func (r *panicRuntime) TeardownSandbox(context.Context, *v1.Pod) error { return nil }
func (r *panicRuntime) RemoveContainer(context.Context, string) error  { return nil }
func (r *panicRuntime) Containers(context.Context, *v1.Pod) ([]ContainerInfo, error) {
	return nil, nil
}
func (r *panicRuntime) Container(_ context.Context, id string) (ContainerInfo, error) {
	return ContainerInfo{ID: id, Exited: true}, nil
}
func (r *panicRuntime) RecordBackoff(context.Context, string, time.Duration, time.Duration) error {
	return nil
}
func (r *panicRuntime) ResizeContainer(context.Context, *v1.Pod, *v1.Container, string) error {
	return nil
}
func (r *panicRuntime) ContainerResources(_ context.Context, _ *v1.Pod, c *v1.Container, _ string) (v1.ResourceRequirements, error) {
	return c.Resources, nil
}
func (r *panicRuntime) ResizePodCgroup(context.Context, *v1.Pod, bool) error { return nil }
func (r *panicRuntime) Exec(context.Context, string, []string, time.Duration) ([]byte, int, error) {
	return nil, 0, nil
}
func (r *panicRuntime) StopContainer(context.Context, *v1.Pod, *v1.Container, string, time.Duration) error {
	return nil
}
func (r *panicRuntime) StartContainer(_ context.Context, _ *v1.Pod, c *v1.Container, attempt int) (ContainerInfo, error) {
	r.mu.Lock()
	r.starts++
	n := r.starts
	r.mu.Unlock()
	if n == 1 {
		panic("injected")
	}
	return ContainerInfo{ID: "id-" + c.Name, Name: c.Name, Attempt: attempt, Running: true, StartedAt: time.Now()}, nil
}

type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (e *eventLog) Event(_ *v1.Pod, _, eventType, reason, msg string) {
	e.mu.Lock()
	e.ev = append(e.ev, eventType+" "+reason+": "+msg)
	e.mu.Unlock()
}

// A panic in a pod's sync is reported as a FailedSync event and the worker
// syncs again after a back-off instead of taking the process down.
func TestSupervisedWorkerSurvivesPanic(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}
	rt, events := &panicRuntime{}, &eventLog{}
	running := make(chan struct{})
	var once sync.Once
	clk := testingclock.NewFakeClock(epoch)
	w := NewPod(pod, Config{
		Runtime: rt, Recorder: events, Backoff: DefaultBackoff, Clock: clk,
		Publish: func(p *v1.Pod) {
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Running != nil {
					once.Do(func() { close(running) })
				}
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Supervise(ctx)
	// The worker starts over after its 1 s back-off.
	for i := 0; ; i++ {
		select {
		case <-running:
		case <-time.After(time.Millisecond):
			if i > 10000 {
				t.Fatal("container never ran after the panic")
			}
			clk.Step(time.Second)
			continue
		}
		break
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	if len(events.ev) == 0 || !strings.HasPrefix(events.ev[0], "Warning FailedSync: Error syncing pod, will retry: panic: injected") {
		t.Fatalf("events %q, want a FailedSync warning first", events.ev)
	}
}

// A panicking hook is the hook's failure, not the worker's.
func TestGuardHook(t *testing.T) {
	_, err := guardHook(nil, func() (string, error) { panic("hook") })
	if err == nil || err.Error() != "panic: hook" {
		t.Fatalf("err = %v", err)
	}
}

// A panic that left the pod's lock held is not survived: hostlet exits
// rather than hang every reader of the pod.
func TestEnsureUnlockedExitsOnAbandonedLock(t *testing.T) {
	w := NewPod(&v1.Pod{}, Config{})
	std := log.StandardLogger()
	exited := 0
	defer func(f func(int)) { std.ExitFunc = f }(std.ExitFunc)
	std.ExitFunc = func(int) { exited++ }
	w.ensureUnlocked(log.NewEntry(std))
	if exited != 0 {
		t.Fatal("exited with the lock free")
	}
	w.shared.mu.Lock()
	w.ensureUnlocked(log.NewEntry(std))
	if exited != 1 {
		t.Fatal("no exit with the lock abandoned")
	}
}

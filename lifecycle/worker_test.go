package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/probes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// fakeRuntime runs containers in memory and records what it was asked;
// block makes StartContainer wait (a hanging pull) until its context ends.
type fakeRuntime struct {
	mu      sync.Mutex
	clock   clock.PassiveClock
	block   bool
	blocked chan struct{} // closed when a start blocks
	started []string
	stopped []string
	// stopCodes are the exit codes a stop gives the named containers
	// (default 137: a process that traps SIGTERM can exit 0).
	stopCodes map[string]int32
	// onStop, if set, is called as a container's stop begins.
	onStop     func(name string)
	stopGrace  []time.Duration
	sandbox    bool
	teardowns  int
	containers map[string]ContainerInfo
	n          int
	// calls is every call that changes something, in order ("start c#1",
	// "stop c 30s", "remove id3", "sandbox", "teardown", "backoff id3 10s 20s").
	calls []string
	// failStart and failSandbox make the next starts of a container, or
	// sandbox setups, fail with that error until cleared.
	failStart   map[string]error
	failSandbox error
	// startErrors makes each start of a container create an instance
	// whose process does not run (StartError, with this message).
	startErrors map[string]string
	// resources are the containers' resources as resized; failResize
	// and failPodCgroup make container and pod-level resizes fail.
	resources     map[string]v1.ResourceRequirements
	failResize    error
	failPodCgroup map[string]error
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{containers: map[string]ContainerInfo{}, clock: clock.RealClock{}, failStart: map[string]error{}, startErrors: map[string]string{}}
}

func (f *fakeRuntime) PrepareSandbox(ctx context.Context, pod *v1.Pod) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "sandbox")
	if f.failSandbox != nil {
		return nil, f.failSandbox
	}
	f.sandbox = true
	return []string{"10.0.0.2"}, nil
}

func (f *fakeRuntime) SandboxReady(pod *v1.Pod) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sandbox
}

func (f *fakeRuntime) TeardownSandbox(ctx context.Context, pod *v1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandbox = false
	f.teardowns++
	f.calls = append(f.calls, "teardown")
	return nil
}

func (f *fakeRuntime) StartContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int) (ContainerInfo, error) {
	f.mu.Lock()
	block, blocked := f.block, f.blocked
	f.mu.Unlock()
	if block {
		if blocked != nil {
			close(blocked)
		}
		<-ctx.Done()
		return ContainerInfo{}, &Failure{Reason: "ErrImagePull", Message: ctx.Err().Error()}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("start %s#%d", c.Name, attempt))
	if err := f.failStart[c.Name]; err != nil {
		return ContainerInfo{}, err
	}
	f.n++
	if msg, ok := f.startErrors[c.Name]; ok {
		info := ContainerInfo{ID: fmt.Sprintf("id%d", f.n), Name: c.Name, Attempt: attempt, Exited: true, ExitCode: 128,
			Reason: "StartError", Message: msg, StartedAt: time.Unix(0, 0), FinishedAt: f.clock.Now()}
		f.containers[info.ID] = info
		return info, &Failure{Reason: "StartError", Message: msg, Info: &info}
	}
	info := ContainerInfo{ID: fmt.Sprintf("id%d", f.n), Name: c.Name, Attempt: attempt, Running: true, StartedAt: f.clock.Now(), Image: c.Image}
	f.containers[info.ID] = info
	f.started = append(f.started, c.Name)
	return info, nil
}

func (f *fakeRuntime) StopContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, grace time.Duration) error {
	if f.onStop != nil {
		f.onStop(c.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	info := f.containers[id]
	if info.Running {
		code := int32(137)
		if c, ok := f.stopCodes[info.Name]; ok {
			code = c
		}
		info.Running, info.Exited, info.ExitCode, info.FinishedAt = false, true, code, f.clock.Now()
		f.containers[id] = info
	}
	f.stopped = append(f.stopped, info.Name)
	f.stopGrace = append(f.stopGrace, grace)
	f.calls = append(f.calls, fmt.Sprintf("stop %s %v", info.Name, grace))
	return nil
}

func (f *fakeRuntime) RemoveContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, id)
	f.calls = append(f.calls, "remove "+id)
	return nil
}

func (f *fakeRuntime) Containers(ctx context.Context, pod *v1.Pod) ([]ContainerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ContainerInfo
	for _, c := range f.containers {
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeRuntime) Container(ctx context.Context, id string) (ContainerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.containers[id], nil
}

func (f *fakeRuntime) RecordBackoff(ctx context.Context, id string, applied, next time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("backoff %s %v %v", id, applied, next))
	if info, ok := f.containers[id]; ok {
		info.BackoffApplied, info.BackoffNext = applied, next
		f.containers[id] = info
	}
	return nil
}

// ResizeContainer records "resize c cpu=.. mem=.." with the container's
// new limits, or fails with failResize.
func (f *fakeRuntime) ResizeContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failResize != nil {
		return f.failResize
	}
	f.calls = append(f.calls, fmt.Sprintf("resize %s cpu=%s mem=%s", c.Name, c.Resources.Limits.Cpu(), c.Resources.Limits.Memory()))
	if f.resources == nil {
		f.resources = map[string]v1.ResourceRequirements{}
	}
	f.resources[id] = *c.Resources.DeepCopy()
	return nil
}

// ContainerResources is what a container was last resized to, else its
// spec's (it was created with them).
func (f *fakeRuntime) ContainerResources(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) (v1.ResourceRequirements, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.resources[id]; ok {
		return r, nil
	}
	return c.Resources, nil
}

// ResizePodCgroup records "pod-cgroup grow" or "pod-cgroup shrink", or
// fails with failPodCgroup's error for that step.
func (f *fakeRuntime) ResizePodCgroup(ctx context.Context, pod *v1.Pod, grow bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	step := "shrink"
	if grow {
		step = "grow"
	}
	if err := f.failPodCgroup[step]; err != nil {
		return err
	}
	f.calls = append(f.calls, "pod-cgroup "+step)
	return nil
}

func (f *fakeRuntime) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	<-ctx.Done()
	return nil, -1, ctx.Err()
}

func testPod(containers ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c, Image: "img"})
	}
	return pod
}

// runWorker runs a worker until it reports the pod terminated.
func runWorker(t *testing.T, pod *v1.Pod, rt *fakeRuntime) (*Pod, <-chan *v1.Pod) {
	t.Helper()
	done := make(chan *v1.Pod, 1)
	w := NewPod(pod, Config{Runtime: rt, Backoff: DefaultBackoff, Prober: probes.NewProber(),
		Terminated: func(p *v1.Pod) { done <- p }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx)
	return w, done
}

func deleted(pod *v1.Pod, grace int64) *v1.Pod {
	pod = pod.DeepCopy()
	now := metav1.Now()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, &grace
	return pod
}

func waitTerminated(t *testing.T, done <-chan *v1.Pod, within time.Duration) *v1.Pod {
	t.Helper()
	select {
	case p := <-done:
		return p
	case <-time.After(within):
		t.Fatalf("pod not terminated within %v", within)
		return nil
	}
}

// A deletion arriving while the worker is stuck in a start (an image pull
// that hangs) interrupts it and the pod terminates at once.
func TestDeleteInterruptsStart(t *testing.T) {
	rt := newFakeRuntime()
	rt.block, rt.blocked = true, make(chan struct{})
	pod := testPod("c")
	w, done := runWorker(t, pod, rt)
	<-rt.blocked
	w.Update(deleted(pod, 30))
	waitTerminated(t, done, 2*time.Second)
	if rt.SandboxReady(pod) {
		t.Error("sandbox still up after termination")
	}
}

// A worker created for a pod already being deleted (hostlet restarted during
// its termination) only finishes the termination, with what is left of the
// grace period: nothing starts, and no readiness is published.
func TestResumedTermination(t *testing.T) {
	rt := newFakeRuntime()
	rt.sandbox = true
	rt.containers["old"] = ContainerInfo{ID: "old", Name: "c", Running: true, StartedAt: time.Now().Add(-time.Minute)}
	pod := testPod("c")
	pod.Status.Phase = v1.PodRunning
	grace := int64(30)
	// Deleted 25 s ago with 30 s of grace: 5 s are left.
	at := metav1.NewTime(time.Now().Add(5 * time.Second))
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &at, &grace
	var mu sync.Mutex
	var published []*v1.Pod
	done := make(chan *v1.Pod, 1)
	w := NewPod(pod, Config{Runtime: rt, Backoff: DefaultBackoff, Prober: probes.NewProber(),
		Publish:    func(p *v1.Pod) { mu.Lock(); published = append(published, p); mu.Unlock() },
		Terminated: func(p *v1.Pod) { done <- p }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitTerminated(t, done, 2*time.Second)
	if len(rt.started) != 0 {
		t.Errorf("started %v during a resumed termination", rt.started)
	}
	if len(rt.stopGrace) != 1 || rt.stopGrace[0] > 6*time.Second {
		t.Errorf("stop grace %v, want the ~5 s left", rt.stopGrace)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range published {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				t.Errorf("published Ready=True during a resumed termination")
			}
		}
	}
}

// Every container of a pod is started in one sync, and the sandbox stays
// until the pod is terminal even when the first container exits at once.
func TestAllContainersStartBeforeTeardown(t *testing.T) {
	s := newScenario(t, testPod("a", "b"))
	s.wantCalls("start a#0", "start b#0")
	s.exit("a", 0)
	if got := s.calls("teardown"); len(got) != 0 || !s.rt.SandboxReady(s.w.Object()) {
		t.Fatalf("sandbox torn down while container b runs")
	}
	// A grace period under the kubelet's minimum gets 2 s.
	s.delete(1)
	if got := s.calls("stop", "teardown"); !slices.Equal(got, []string{"stop b 2s", "teardown"}) {
		t.Fatalf("termination calls %q", got)
	}
}

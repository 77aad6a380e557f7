package lifecycle

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/probes"
	log "github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// scenario drives one pod worker in lockstep with the test: the worker
// pauses each time it waits for an event, the test acts (a container exits,
// the clock moves, a probe decides, the pod is deleted) and settles, which
// lets the worker run until it waits again with nothing pending. Time is a
// fake clock, so back-offs of minutes take no time.
type scenario struct {
	t      *testing.T
	clk    *testingclock.FakeClock
	rt     *fakeRuntime
	pr     *fakeProber
	ev     *eventLog
	w      *Pod
	ctx    context.Context
	idle   chan (<-chan time.Time)
	resume chan struct{}
	timer  <-chan time.Time
	done   chan *v1.Pod
	tracer trace.Tracer
	// releasing, when set, holds the worker in Released until closed.
	releasing chan struct{}
	// previous is Config.Previous (set by a setup function).
	previous *v1.PodStatus
}

// TestMain keeps the workers' logs out of the test output unless -v.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		log.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}

// epoch is the fake clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newScenario makes the worker of pod; setup may prepare the runtime (what
// it holds before the worker starts) before the worker runs its first sync.
func newScenario(t *testing.T, pod *v1.Pod, setup ...func(*scenario)) *scenario {
	t.Helper()
	clk := testingclock.NewFakeClock(epoch)
	rt := newFakeRuntime()
	rt.clock = clk
	s := &scenario{
		t: t, clk: clk, rt: rt, pr: newFakeProber(clk), ev: &eventLog{},
		idle: make(chan (<-chan time.Time)), resume: make(chan struct{}), done: make(chan *v1.Pod, 1),
	}
	for _, f := range setup {
		f(s)
	}
	s.w = NewPod(pod, Config{
		Runtime: rt, Recorder: s.ev, Backoff: DefaultBackoff, Prober: s.pr, Clock: clk,
		HostIPs:    []string{"192.0.2.1"},
		Tracer:     s.tracer,
		Previous:   s.previous,
		Terminated: func(p *v1.Pod) { s.done <- p },
		Released: func(p *v1.Pod) {
			rt.mu.Lock()
			rt.calls = append(rt.calls, "released "+string(p.Status.Phase))
			rt.mu.Unlock()
			if s.releasing != nil {
				<-s.releasing
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.ctx = ctx
	s.w.idle = func(timer <-chan time.Time) {
		select {
		case s.idle <- timer:
		case <-ctx.Done():
			return
		}
		select {
		case <-s.resume:
		case <-ctx.Done():
		}
	}
	go s.w.Run(ctx)
	s.waitIdle()
	s.settle()
	return s
}

// waitIdle waits for the worker to pause (a guard against a hang, not a
// timing assertion).
func (s *scenario) waitIdle() {
	s.t.Helper()
	select {
	case s.timer = <-s.idle:
	case <-time.After(10 * time.Second):
		s.t.Fatal("the worker never came to wait for an event")
	}
}

// settle lets the paused worker run while it has something to handle.
func (s *scenario) settle() {
	s.t.Helper()
	for len(s.w.wake) > 0 || len(s.timer) > 0 {
		s.resume <- struct{}{}
		s.waitIdle()
	}
}

// step moves the clock and lets the worker react.
func (s *scenario) step(d time.Duration) {
	s.t.Helper()
	s.clk.Step(d)
	s.settle()
}

// exit ends the current instance of a container with code, as the
// runtime's exit event reports it.
func (s *scenario) exit(name string, code int32) {
	s.t.Helper()
	s.rt.mu.Lock()
	var info ContainerInfo
	for _, c := range s.rt.containers {
		if c.Name == name && c.Running {
			info = c
		}
	}
	if info.ID == "" {
		s.rt.mu.Unlock()
		s.t.Fatalf("no running instance of %s", name)
	}
	info.Running, info.Exited, info.ExitCode, info.FinishedAt = false, true, code, s.clk.Now()
	s.rt.containers[info.ID] = info
	s.rt.mu.Unlock()
	s.w.Exited(info)
	s.settle()
}

// probe delivers a probe verdict for the current instance of a container.
func (s *scenario) probe(name string, kind probes.Kind, ok bool) {
	s.t.Helper()
	cfg, found := s.pr.worker(name, kind)
	if !found {
		s.t.Fatalf("no %s probe worker for %s", kind, name)
	}
	cfg.Set(kind, ok)
	s.settle()
}

// delete deletes the pod with grace seconds and waits for the worker to
// hand over the final status. During the termination the test runs
// meanwhile (e.g. to move the clock) before the worker is resumed.
func (s *scenario) delete(grace int64, meanwhile ...func()) *v1.Pod {
	s.t.Helper()
	s.w.Update(deleted(s.w.Object(), grace))
	s.resume <- struct{}{}
	for _, f := range meanwhile {
		f()
	}
	select {
	case p := <-s.done:
		return p
	case <-time.After(10 * time.Second):
		s.t.Fatal("pod not terminated")
		return nil
	}
}

// calls takes the runtime calls that start with one of prefixes; the
// others stay for later.
func (s *scenario) calls(prefixes ...string) []string {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	var out, rest []string
	for _, c := range s.rt.calls {
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(c, p) }) {
			out = append(out, c)
		} else {
			rest = append(rest, c)
		}
	}
	s.rt.calls = rest
	return out
}

func (s *scenario) wantCalls(want ...string) {
	s.t.Helper()
	if got := s.calls("start", "stop"); !slices.Equal(got, want) {
		s.t.Fatalf("runtime calls %q, want %q", got, want)
	}
}

// status is the pod's latest computed status.
func (s *scenario) status() v1.PodStatus {
	return s.w.Status().Status
}

// container returns the status of a container (init or main).
func (s *scenario) container(name string) v1.ContainerStatus {
	s.t.Helper()
	st := s.status()
	for _, c := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
		if c.Name == name {
			return c
		}
	}
	s.t.Fatalf("no status of container %s", name)
	return v1.ContainerStatus{}
}

func (s *scenario) wantWaiting(name, reason string) {
	s.t.Helper()
	if w := s.container(name).State.Waiting; w == nil || w.Reason != reason {
		s.t.Fatalf("%s state %+v, want waiting %s", name, s.container(name).State, reason)
	}
}

func (s *scenario) wantPhase(phase v1.PodPhase) {
	s.t.Helper()
	if got := s.status().Phase; got != phase {
		s.t.Fatalf("phase %s, want %s", got, phase)
	}
}

func (s *scenario) events() []string {
	s.ev.mu.Lock()
	defer s.ev.mu.Unlock()
	return slices.Clone(s.ev.ev)
}

func (s *scenario) wantEvent(prefix string) {
	s.t.Helper()
	for _, e := range s.events() {
		if strings.HasPrefix(e, prefix) {
			return
		}
	}
	s.t.Fatalf("no event %q in %q", prefix, s.events())
}

// fakeProber records the probe workers lifecycle starts (the test decides
// their verdicts with scenario.probe) and runs hooks through hook.
type fakeProber struct {
	clk     *testingclock.FakeClock
	mu      sync.Mutex
	workers map[string]probes.WorkerConfig
	// ctxs are the workers' contexts, by the same key.
	ctxs  map[string]context.Context
	hooks []string
	// hook runs a hook ("postStart c", "preStop c"); nil succeeds at once.
	hook func(ctx context.Context, what string) error
}

func newFakeProber(clk *testingclock.FakeClock) *fakeProber {
	return &fakeProber{clk: clk, workers: map[string]probes.WorkerConfig{}, ctxs: map[string]context.Context{}}
}

func (f *fakeProber) Probe(context.Context, *v1.ProbeHandler, probes.Target, time.Duration) (probes.Result, string) {
	return probes.Failure, "the fake prober only has workers"
}

func (f *fakeProber) Hook(ctx context.Context, h *v1.LifecycleHandler, t probes.Target, _ *v1.Pod) (string, error) {
	what := "postStart " + t.Container.Name
	if t.Container.Lifecycle.PreStop == h {
		what = "preStop " + t.Container.Name
	}
	f.mu.Lock()
	f.hooks = append(f.hooks, what)
	hook := f.hook
	f.mu.Unlock()
	if hook == nil {
		return "", nil
	}
	if err := hook(ctx, what); err != nil {
		return "hook failed", err
	}
	return "", nil
}

func (f *fakeProber) Start(ctx context.Context, cfg probes.WorkerConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprint(cfg.Log.Data["container"], "/", cfg.Kind)
	f.workers[key], f.ctxs[key] = cfg, ctx
}

// running reports whether a probe worker of the container is still on.
func (f *fakeProber) running(name string, kind probes.Kind) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, ok := f.ctxs[fmt.Sprint(name, "/", kind)]
	return ok && ctx.Err() == nil
}

func (f *fakeProber) worker(name string, kind probes.Kind) (probes.WorkerConfig, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg, ok := f.workers[fmt.Sprint(name, "/", kind)]
	return cfg, ok
}

// spec helpers

func sidecar(name string) v1.Container {
	return v1.Container{Name: name, Image: "img", RestartPolicy: policy(v1.ContainerRestartPolicyAlways)}
}

func withInit(pod *v1.Pod, cs ...v1.Container) *v1.Pod {
	for _, c := range cs {
		if c.Image == "" {
			c.Image = "img"
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	return pod
}

func restartPolicy(pod *v1.Pod, rp v1.RestartPolicy) *v1.Pod {
	pod.Spec.RestartPolicy = rp
	return pod
}

func startupProbe() *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
}

func int64p(v int64) *int64 { return &v }

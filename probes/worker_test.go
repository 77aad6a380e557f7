package probes

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// probeWorker runs a worker on a fake clock whose runs answer from results
// (in order); verdicts and runs are reported on the returned channels.
type probeWorker struct {
	clk      *testingclock.FakeClock
	runs     chan int
	verdicts chan bool
}

func startWorker(t *testing.T, kind Kind, spec *v1.Probe, started func() bool, kick <-chan struct{}, results ...Result) *probeWorker {
	t.Helper()
	w := &probeWorker{clk: testingclock.NewFakeClock(time.Unix(1000, 0)), runs: make(chan int, 10), verdicts: make(chan bool, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := 0
	NewProber().Start(ctx, WorkerConfig{
		Kind: kind, Spec: spec, StartedAt: w.clk.Now(), Clock: w.clk, Kick: kick,
		Run: func(context.Context, time.Duration) (Result, string) {
			r := results[min(n, len(results)-1)]
			n++
			w.runs <- n
			return r, ""
		},
		Started: started,
		Set:     func(_ Kind, ok bool) { w.verdicts <- ok },
		Event:   func(Kind, Result, string) {},
	})
	return w
}

// tick moves the clock once the worker waits on it and returns the run it
// caused.
func (w *probeWorker) tick(t *testing.T, d time.Duration) int {
	t.Helper()
	w.step(d)
	return w.run(t)
}

// run waits for the worker's next run.
func (w *probeWorker) run(t *testing.T) int {
	t.Helper()
	return receive(t, w.runs, "run")
}

// receive waits for a value on ch, failing the test after 10 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no " + what)
		var zero T
		return zero
	}
}

// idleTick moves the clock and checks that no run follows soon (a
// negative check: it can miss a late run, never fail a correct worker).
func (w *probeWorker) idleTick(t *testing.T, d time.Duration) {
	t.Helper()
	w.step(d)
	select {
	case n := <-w.runs:
		t.Fatalf("run %d", n)
	case <-time.After(100 * time.Millisecond):
	}
}

func (w *probeWorker) step(d time.Duration) {
	for !w.clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	w.clk.Step(d)
}

func (w *probeWorker) verdict(t *testing.T) bool {
	t.Helper()
	return receive(t, w.verdicts, "verdict")
}

func always() bool { return true }

// A liveness probe fails only after failureThreshold failed runs in a row,
// one per period, the first a period after the start.
func TestWorkerFailureThreshold(t *testing.T) {
	w := startWorker(t, Liveness, &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3}, always, nil, Failure)
	for i := 1; i <= 3; i++ {
		if n := w.tick(t, 10*time.Second); n != i {
			t.Fatalf("tick %d ran %d", i, n)
		}
	}
	if w.verdict(t) {
		t.Fatal("liveness passed")
	}
	if len(w.verdicts) != 0 {
		t.Fatal("more than one verdict")
	}
}

// Readiness is probed at once when the container starts, as the kubelet
// does when it first makes the running container's status; then once a
// period.
func TestWorkerReadinessAtStart(t *testing.T) {
	w := startWorker(t, Readiness, &v1.Probe{PeriodSeconds: 10}, always, nil, Success)
	if n := w.run(t); n != 1 {
		t.Fatalf("run %d at the start", n)
	}
	if !w.verdict(t) {
		t.Fatal("not ready")
	}
	if n := w.tick(t, 10*time.Second); n != 2 {
		t.Fatalf("run %d a period later", n)
	}
}

// A verdict is given once, not again at every run that confirms it; a
// change is given at once.
func TestWorkerVerdictOnChange(t *testing.T) {
	w := startWorker(t, Readiness, &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1}, always, nil, Success, Success, Success, Failure, Failure, Success)
	w.run(t)
	// Each verdict after so many more runs: the successes at runs 2 and 3
	// and the failure at run 5 give none.
	for _, want := range []struct {
		runs  int
		ready bool
	}{{0, true}, {3, false}, {2, true}} {
		for range want.runs {
			w.tick(t, time.Second)
		}
		if got := w.verdict(t); got != want.ready {
			t.Fatalf("ready %v, want %v", got, want.ready)
		}
	}
	if len(w.verdicts) != 0 {
		t.Fatalf("%d more verdicts", len(w.verdicts))
	}
}

// Readiness turns true after successThreshold successes in a row, and a
// failure in between starts the count over.
func TestWorkerSuccessThreshold(t *testing.T) {
	w := startWorker(t, Readiness, &v1.Probe{PeriodSeconds: 1, SuccessThreshold: 2, FailureThreshold: 1}, always, nil, Success, Failure, Success, Success)
	w.run(t)
	w.tick(t, time.Second)
	if w.verdict(t) {
		t.Fatal("ready after one success")
	}
	w.tick(t, time.Second)
	w.tick(t, time.Second)
	if !w.verdict(t) {
		t.Fatal("not ready after two successes")
	}
}

// No run happens before initialDelaySeconds.
func TestWorkerInitialDelay(t *testing.T) {
	w := startWorker(t, Readiness, &v1.Probe{PeriodSeconds: 10, InitialDelaySeconds: 15}, always, nil, Success)
	w.idleTick(t, 10*time.Second)
	if n := w.tick(t, 10*time.Second); n != 1 {
		t.Fatalf("no run after the initial delay")
	}
}

// Liveness waits for the startup probe; when it passes (Kick) the liveness
// probe runs at once, not a period later.
func TestWorkerWaitsForStartup(t *testing.T) {
	started := make(chan struct{})
	isStarted := func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	}
	w := startWorker(t, Liveness, &v1.Probe{PeriodSeconds: 10}, isStarted, started, Success)
	w.idleTick(t, 10*time.Second)
	close(started)
	receive(t, w.runs, "run when the startup probe passed")
}

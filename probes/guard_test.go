package probes

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// A probe run that panics is reported and the worker goes on probing.
func TestWorkerSurvivesPanic(t *testing.T) {
	var runs atomic.Int32
	panicked := make(chan string, 1)
	failed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	NewProber().Start(ctx, WorkerConfig{
		Kind:      Liveness,
		Clock:     clk,
		Spec:      &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1},
		StartedAt: clk.Now(),
		Run: func(context.Context, time.Duration) (Result, string) {
			if runs.Add(1) == 1 {
				panic("probe bug")
			}
			return Failure, "down"
		},
		Started:  func() bool { return true },
		Set:      func(Kind, bool) {},
		Event:    func(Kind, Result, string) { failed <- struct{}{} },
		Panicked: func(k Kind, msg string) { panicked <- string(k) + ": " + msg },
	})
	// Periods pass until the worker has panicked and probed again.
	var msg string
	for i := 0; ; i++ {
		select {
		case msg = <-panicked:
		case <-failed:
			if msg != "Liveness: probe bug" {
				t.Fatalf("panicked with %q", msg)
			}
			return
		case <-time.After(time.Millisecond):
			if i > 10000 {
				t.Fatal("worker did not probe again after the panic")
			}
			clk.Step(time.Second)
		}
	}
}

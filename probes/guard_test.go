package probes

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// A probe run that panics is reported and the worker goes on probing.
func TestWorkerSurvivesPanic(t *testing.T) {
	var runs atomic.Int32
	panicked := make(chan string, 1)
	failed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	NewProber().Start(ctx, WorkerConfig{
		Kind:      Liveness,
		Spec:      &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1},
		StartedAt: time.Now(),
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
	select {
	case m := <-panicked:
		if m != "Liveness: probe bug" {
			t.Fatalf("panicked with %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("panic not reported")
	}
	select {
	case <-failed:
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not probe again after the panic")
	}
}

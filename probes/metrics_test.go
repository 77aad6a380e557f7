package probes

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func TestProbeTotalCountsRunsAndForgetsStoppedWorkers(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := MetricLabels{Namespace: "ns", Pod: "p", PodUID: "u1", Container: "c"}
	results := []Result{Success, Warning, Failure}
	runs := make(chan struct{}, len(results))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n := 0
	go func() {
		defer close(done)
		run(ctx, WorkerConfig{
			Kind: Readiness, Spec: &v1.Probe{FailureThreshold: 10}, StartedAt: clk.Now(), Clock: clk, Metric: m,
			Run: func(context.Context, time.Duration) (Result, string) {
				r := results[n%len(results)]
				n++
				runs <- struct{}{}
				return r, ""
			},
			Started: func() bool { return true },
			Set:     func(Kind, bool) {},
			Event:   func(Kind, Result, string) {},
		})
	}()
	// Readiness runs at once, then once a period.
	for i := range results {
		if i > 0 {
			for !clk.HasWaiters() {
				time.Sleep(time.Millisecond)
			}
			clk.Step(10 * time.Second)
		}
		<-runs
	}
	// The last run is counted after it returns: wait for it.
	count := func(result string) float64 {
		return testutil.ToFloat64(ProbeTotal.WithLabelValues("Readiness", result, "c", "p", "ns", "u1"))
	}
	for i := 0; count("failed") == 0 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if s, f := count("successful"), count("failed"); s != 2 || f != 1 {
		t.Errorf("prober_probe_total successful %v failed %v, want 2 and 1", s, f)
	}
	cancel()
	<-done
	if n := testutil.CollectAndCount(ProbeTotal); n != 0 {
		t.Errorf("%d series left after the worker stopped", n)
	}
}

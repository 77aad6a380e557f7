package probes

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Kind is which probe a worker runs; its value is how events name it.
type Kind string

const (
	Liveness  Kind = "Liveness"
	Readiness Kind = "Readiness"
	Startup   Kind = "Startup"
)

// WorkerConfig is one probe of one container instance.
type WorkerConfig struct {
	Kind      Kind
	Spec      *v1.Probe
	StartedAt time.Time
	// Run executes the probe once, bounded by timeout.
	Run func(ctx context.Context, timeout time.Duration) (Result, string)
	// Started reports whether the container passed its startup probe (or
	// has none); liveness and readiness wait for it, startup stops at it.
	Started func() bool
	// Set receives the probe's verdict when it changes: the first time a
	// threshold is crossed and each time the other one is. The kubelet's
	// results manager pushes only changes too; a verdict repeated every
	// period would wake the pod's worker for nothing.
	Set func(kind Kind, ok bool)
	// Event receives every failed or warning run (Unhealthy events).
	Event func(kind Kind, r Result, output string)
	// Kick makes the worker probe at once (liveness and readiness when the
	// startup probe succeeds), as the kubelet does.
	Kick <-chan struct{}
	// Log names the pod and container in the log of a recovered panic, and
	// Panicked reports it on the container; the worker then goes on probing.
	Log      *log.Entry
	Panicked func(kind Kind, msg string)
	// Clock times the periods and the initial delay; nil is the real one.
	Clock clock.WithTicker
	// Metric names the container in prober_probe_total.
	Metric MetricLabels
}

func seconds(v, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

func run(ctx context.Context, cfg WorkerConfig) {
	s := cfg.Spec
	period := seconds(s.PeriodSeconds, 10)
	timeout := seconds(s.TimeoutSeconds, 1)
	success := int(s.SuccessThreshold)
	if success <= 0 {
		success = 1
	}
	failure := int(s.FailureThreshold)
	if failure <= 0 {
		failure = 3
	}
	delay := time.Duration(s.InitialDelaySeconds) * time.Second
	var last, verdict *bool
	streak := 0
	tick := cfg.Clock.NewTicker(period)
	defer tick.Stop()
	defer cfg.Metric.forget(cfg.Kind)
	kick := cfg.Kick
	// Readiness is probed at once: the kubelet triggers a readiness probe
	// whenever it makes the status of a started container whose readiness
	// is not known yet, which it does right after the start, so a pod is
	// Ready without waiting a period. Liveness and startup probes wait for
	// their first tick, as with the kubelet, whose workers tick from
	// before the container runs.
	for first := true; ; first = false {
		if !first || cfg.Kind != Readiness {
			select {
			case <-ctx.Done():
				return
			case <-tick.C():
			case <-kick:
				kick = nil // taken once: a closed channel stays ready
			}
		}
		if cfg.Clock.Since(cfg.StartedAt) < delay {
			continue
		}
		started := cfg.Started()
		if cfg.Kind == Startup && started {
			return
		}
		if cfg.Kind != Startup && !started {
			continue
		}
		r, out := cfg.Run(ctx, timeout)
		if ctx.Err() != nil {
			return
		}
		cfg.Metric.count(cfg.Kind, r)
		if r != Success {
			cfg.Event(cfg.Kind, r, out)
		}
		ok := r != Failure
		if last != nil && *last == ok {
			streak++
		} else {
			last, streak = &ok, 1
		}
		if (ok && streak >= success) || (!ok && streak >= failure) {
			if verdict == nil || *verdict != ok {
				verdict = &ok
				cfg.Set(cfg.Kind, ok)
			}
			if cfg.Kind == Startup || (cfg.Kind == Liveness && !ok) {
				return
			}
		}
	}
}

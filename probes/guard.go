package probes

import (
	"context"

	"github.com/hostlet/hostlet/crash"
)

// supervise runs a probe worker and survives its panics, as the kubelet's
// workers do: the panic is logged and reported, and probing resumes a period
// later (with fresh thresholds), so one bad probe run neither kills the node
// nor leaves the container unprobed.
func supervise(ctx context.Context, cfg WorkerConfig) {
	for runGuarded(ctx, cfg) {
		select {
		case <-ctx.Done():
			return
		case <-cfg.Clock.After(seconds(cfg.Spec.PeriodSeconds, 10)):
		}
	}
}

// runGuarded runs the worker and reports whether it panicked.
func runGuarded(ctx context.Context, cfg WorkerConfig) (panicked bool) {
	defer crash.Recover(cfg.Log, func(msg string) {
		panicked = true
		if cfg.Panicked != nil {
			cfg.Panicked(cfg.Kind, msg)
		}
	})
	run(ctx, cfg)
	return false
}

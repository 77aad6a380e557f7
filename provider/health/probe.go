package health

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Probe asks probe every period, from now on, until ctx ends: each answer
// within timeout is a beat of h, each failure its last error. It is the
// kubelet's updateRuntimeUp: a cheap call that a hung containerd does not
// answer, where the event stream of a hung one merely goes quiet.
func (h *Heartbeat) Probe(ctx context.Context, clk clock.WithTicker, period, timeout time.Duration, probe func(context.Context) error) {
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			h.Failed(err)
		} else {
			h.Beat()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

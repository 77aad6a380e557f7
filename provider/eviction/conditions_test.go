package eviction

import (
	"context"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/node"
	v1 "k8s.io/api/core/v1"
)

// The node's pressure conditions come from the eviction manager's round:
// on as soon as a threshold is met (a soft one before its grace period),
// kept until the signal is back above threshold plus minimum reclaim, then
// for the pressure transition period; the node is told of each change.
func TestNodeConditionsWaitForMinimumReclaim(t *testing.T) {
	disk := func(avail int64) node.Observations {
		return node.Observations{
			node.SignalNodeFsAvailable: {Available: avail, Capacity: 100 * mi},
			node.SignalMemoryAvailable: {Available: 4096 * mi, Capacity: 8192 * mi},
		}
	}
	cfg := Config{
		Hard:                     mustThresholds(t, map[string]string{"nodefs.available": "10Mi"}),
		MinReclaim:               node.Thresholds{node.SignalNodeFsAvailable: {Signal: node.SignalNodeFsAvailable, Percentage: 0.05}},
		PressureTransitionPeriod: 30 * time.Second,
	}
	m, sig, _, _, clk := newTestManager(cfg, disk(50*mi), nil, fakeStats{})
	noop := func(context.Context) error { return nil }
	m.containerGC, m.imageGC = noop, noop
	ctx := context.Background()
	round := func(avail int64, wantDisk bool, wantUpdates int) {
		t.Helper()
		sig.obs = disk(avail)
		m.synchronize(ctx)
		if got := m.UnderPressure(v1.NodeDiskPressure); got != wantDisk {
			t.Fatalf("available %dMi at %v: DiskPressure %v, want %v", avail/mi, clk.Now().Unix(), got, wantDisk)
		}
		if m.UnderPressure(v1.NodeMemoryPressure) || m.UnderPressure(v1.NodePIDPressure) {
			t.Fatalf("available %dMi: memory or PID pressure", avail/mi)
		}
		if sig.updates != wantUpdates {
			t.Fatalf("available %dMi: %d status updates, want %d", avail/mi, sig.updates, wantUpdates)
		}
	}
	round(50*mi, false, 0)
	round(8*mi, true, 1)
	// Above the threshold, not yet by the minimum reclaim (5% of 100Mi):
	// still under pressure, well past the transition period.
	clk.Step(time.Minute)
	round(12*mi, true, 1)
	clk.Step(time.Minute)
	round(14*mi, true, 1)
	// Above threshold and minimum reclaim: relieved, but the condition
	// holds for the transition period since it was last observed.
	clk.Step(time.Second)
	round(16*mi, true, 1)
	clk.Step(20 * time.Second)
	round(14*mi, true, 1) // no longer met, so no minimum reclaim to wait for
	clk.Step(11 * time.Second)
	round(14*mi, false, 2)
}

// A soft threshold sets its condition at once, whatever its grace period.
func TestSoftThresholdSetsPressureAtOnce(t *testing.T) {
	cfg := Config{
		Soft:                     mustThresholds(t, map[string]string{"memory.available": "1Gi"}),
		SoftGrace:                map[string]time.Duration{node.SignalMemoryAvailable: time.Hour},
		PressureTransitionPeriod: time.Minute,
	}
	obs := node.Observations{node.SignalMemoryAvailable: {Available: 512 * mi, Capacity: 8192 * mi}}
	m, sig, fp, _, _ := newTestManager(cfg, obs, nil, fakeStats{})
	m.synchronize(context.Background())
	if !m.UnderPressure(v1.NodeMemoryPressure) || sig.updates != 1 || len(fp.stops) != 0 {
		t.Fatalf("MemoryPressure %v, %d updates, stops %+v: want pressure, one update, no eviction",
			m.UnderPressure(v1.NodeMemoryPressure), sig.updates, fp.stops)
	}
}

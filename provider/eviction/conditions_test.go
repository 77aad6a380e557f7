package eviction

import (
	"context"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/node"
	v1 "k8s.io/api/core/v1"
)

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

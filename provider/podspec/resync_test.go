package podspec

import (
	"testing"
	"time"
)

// A pod's content volumes are rewritten every syncFrequency, jittered up
// to half a period later as the kubelet's pod workers; unset is a minute.
func TestNextResync(t *testing.T) {
	for _, cfg := range []struct{ set, want time.Duration }{{0, time.Minute}, {10 * time.Second, 10 * time.Second}} {
		r := &Runtime{cfg: Config{SyncFrequency: cfg.set}}
		for range 100 {
			d := time.Until(r.nextResync())
			if d < cfg.want-time.Second || d > cfg.want*3/2 {
				t.Fatalf("syncFrequency %v: next resync in %v, want within [%v, %v]", cfg.set, d, cfg.want, cfg.want*3/2)
			}
		}
	}
}

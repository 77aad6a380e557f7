package podspec

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

// running counts the pulls at once and the most seen.
func concurrentPulls(t *testing.T, p *Puller, n int) int32 {
	t.Helper()
	var now, most atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Pull(context.Background(), func() error {
				c := now.Add(1)
				for {
					m := most.Load()
					if c <= m || most.CompareAndSwap(m, c) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
				now.Add(-1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	return most.Load()
}

// serializeImagePulls pulls one at a time; maxParallelImagePulls bounds
// the pulls at once; neither (or nil) pulls all at once.
func TestPullerParallelism(t *testing.T) {
	if got := concurrentPulls(t, NewPuller(true, nil, 0, 0), 5); got != 1 {
		t.Errorf("serialized: %d at once", got)
	}
	if got := concurrentPulls(t, NewPuller(false, ptr.To[int32](2), 0, 0), 6); got != 2 {
		t.Errorf("maxParallelImagePulls 2: %d at once", got)
	}
	if got := concurrentPulls(t, NewPuller(false, nil, 0, 0), 4); got != 4 {
		t.Errorf("unlimited: %d at once", got)
	}
	if got := concurrentPulls(t, nil, 3); got != 3 {
		t.Errorf("no puller: %d at once", got)
	}
}

// registryPullQPS and registryBurst: the burst passes, the next pull fails
// with the kubelet's "pull QPS exceeded" without pulling.
func TestPullerQPS(t *testing.T) {
	p := NewPuller(true, nil, 0.01, 2)
	pulled := 0
	pull := func() error { pulled++; return nil }
	for i := range 2 {
		if _, err := p.Pull(context.Background(), pull); err != nil {
			t.Fatalf("pull %d within the burst: %v", i, err)
		}
	}
	if _, err := p.Pull(context.Background(), pull); !errors.Is(err, ErrPullQPSExceeded) || err.Error() != "pull QPS exceeded" {
		t.Errorf("beyond the burst: %v", err)
	}
	if pulled != 2 {
		t.Errorf("%d pulls ran, want 2", pulled)
	}
}

// A pull waiting for its turn leaves when its context ends; the waiting
// time is told.
func TestPullerWait(t *testing.T) {
	p := NewPuller(true, nil, 0, 0)
	release := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _ = p.Pull(context.Background(), func() error { close(started); <-release; return nil })
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := p.Pull(ctx, func() error { t.Error("ran out of turn"); return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a cancelled wait: %v", err)
	}
	go func() { time.Sleep(30 * time.Millisecond); close(release) }()
	waited, err := p.Pull(context.Background(), func() error { return nil })
	if err != nil || waited < 20*time.Millisecond {
		t.Errorf("waited %v, %v", waited, err)
	}
}

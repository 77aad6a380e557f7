package server

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestUsageCacheMeasuresInBackground(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := &usageCache{clock: clk}
	var calls atomic.Int64
	measured := make(chan struct{}, 10)
	measure := func() (runtime.DiskUsage, error) {
		n := calls.Add(1)
		defer func() { measured <- struct{}{} }()
		return runtime.DiskUsage{Bytes: uint64(n)}, nil
	}
	if u, _ := c.get("d", measure); u.Bytes != 1 {
		t.Fatalf("first ask: %d, want 1 (measured at once)", u.Bytes)
	}
	<-measured
	clk.Step(30 * time.Second)
	if u, _ := c.get("d", measure); u.Bytes != 1 || calls.Load() != 1 {
		t.Fatalf("within the period: %d after %d walks, want the cached 1", u.Bytes, calls.Load())
	}
	clk.Step(31 * time.Second)
	if u, _ := c.get("d", measure); u.Bytes != 1 {
		t.Fatalf("stale ask returns the last figure at once, got %d", u.Bytes)
	}
	<-measured
	// The background walk lands; the next ask sees it.
	for i := 0; ; i++ {
		if u, _ := c.get("d", measure); u.Bytes == 2 {
			break
		}
		if i > 1000 {
			t.Fatal("the background measurement never landed")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(3 * usagePeriod)
	c.get("other", measure)
	<-measured
	c.mu.Lock()
	_, kept := c.entries["d"]
	c.mu.Unlock()
	if kept {
		t.Fatal("an entry no one asked for in two periods is kept")
	}
}

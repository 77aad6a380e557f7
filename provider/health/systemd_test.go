package health

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

type fakeNotifier chan string

func (f fakeNotifier) Notify(state string) (bool, error) {
	f <- state
	return true, nil
}

// The watchdog pings at once and every interval while healthy, not while
// unhealthy, and again once healthy. (A tick the loop has not yet waited
// for stays in the fake ticker's channel.)
func TestWatchdog(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	n := make(fakeNotifier, 10)
	health := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		Watchdog(ctx, clk, n, 10*time.Second, func() error { return <-health })
	}()
	expectPing := func(want bool) {
		t.Helper()
		select {
		case s := <-n:
			if !want {
				t.Fatalf("pinged %q while unhealthy", s)
			}
			if s != "WATCHDOG=1" {
				t.Fatalf("sent %q", s)
			}
		default:
			if want {
				t.Fatal("no ping while healthy")
			}
		}
	}
	health <- nil
	waitFor(t, func() bool { return len(n) == 1 })
	expectPing(true)
	clk.Step(10 * time.Second)
	health <- errors.New("runtime: frozen")
	expectPing(false)
	clk.Step(10 * time.Second)
	health <- errors.New("runtime: frozen")
	expectPing(false)
	clk.Step(10 * time.Second)
	health <- nil
	waitFor(t, func() bool { return len(n) == 1 })
	expectPing(true)
	cancel()
	<-stopped
}

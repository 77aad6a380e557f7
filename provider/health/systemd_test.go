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

// WATCHDOG_USEC as systemd sets it for a unit with WatchdogSec: pinged at
// half of it; one second or less refused, as by the kubelet.
func TestWatchdogInterval(t *testing.T) {
	for _, tc := range []struct {
		usec    string
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false},
		{"30000000", 15 * time.Second, false},
		{"4000000", 2 * time.Second, false},
		{"1000000", 0, true},
		{"x", 0, true},
	} {
		t.Setenv("WATCHDOG_PID", "")
		t.Setenv("WATCHDOG_USEC", tc.usec)
		got, err := WatchdogInterval()
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("WATCHDOG_USEC=%q: %v %v", tc.usec, got, err)
		}
	}
}

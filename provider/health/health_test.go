package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestHeartbeat(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := New(clk)
	hb := c.Heartbeat("runtime", "containerd", RuntimeThreshold)
	if err := c.Healthy(); err != nil {
		t.Fatalf("a new heartbeat has its threshold to start: %v", err)
	}
	clk.Step(RuntimeThreshold)
	if err := c.Healthy(); err != nil {
		t.Fatalf("at the threshold: %v", err)
	}
	hb.Failed(errors.New("context deadline exceeded"))
	clk.Step(time.Second)
	err := c.Healthy()
	if err == nil || !strings.HasPrefix(err.Error(), "runtime: containerd was last seen active 31s ago; threshold is 30s") ||
		!strings.Contains(err.Error(), "context deadline exceeded") {
		t.Fatalf("past the threshold: %v", err)
	}
	hb.Beat()
	if err := c.Healthy(); err != nil {
		t.Fatalf("after a beat: %v", err)
	}
}

func TestStream(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := New(clk)
	s := c.Stream("pleg", "containerd's event stream", PLEGThreshold)
	clk.Step(PLEGThreshold + time.Second)
	if err := c.Healthy(); err == nil || !strings.Contains(err.Error(), "not yet subscribed") {
		t.Fatalf("never up: %v", err)
	}
	s.Set(nil)
	if err := c.Healthy(); err != nil {
		t.Fatalf("up: %v", err)
	}
	clk.Step(time.Hour) // quiet is not broken
	if err := c.Healthy(); err != nil {
		t.Fatalf("up and quiet: %v", err)
	}
	s.Set(errors.New("EOF"))
	clk.Step(PLEGThreshold)
	if err := c.Healthy(); err != nil {
		t.Fatalf("broken within the threshold: %v", err)
	}
	s.Set(errors.New("connection refused")) // still broken: since stays
	clk.Step(time.Second)
	err := c.Healthy()
	if err == nil || err.Error() != "pleg: containerd's event stream broken for 3m1s; threshold is 3m0s: connection refused" {
		t.Fatalf("broken past the threshold: %v", err)
	}
	s.Set(nil)
	if err := c.Healthy(); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

func TestProgress(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := New(clk)
	p := c.Progress("syncloop", "pod sync", SyncLoopThreshold)
	clk.Step(time.Hour)
	if err := c.Healthy(); err != nil {
		t.Fatalf("idle: %v", err)
	}
	done1 := p.Begin()
	clk.Step(time.Minute)
	done2 := p.Begin()
	clk.Step(SyncLoopThreshold - time.Minute)
	if err := c.Healthy(); err != nil {
		t.Fatalf("within the threshold: %v", err)
	}
	clk.Step(time.Second)
	if err := c.Healthy(); err == nil || !strings.Contains(err.Error(), "syncloop: pod sync took longer than expected: one has been in hand for 5m1s") {
		t.Fatalf("the first past the threshold: %v", err)
	}
	done1()
	if err := c.Healthy(); err != nil {
		t.Fatalf("the second is within it: %v", err)
	}
	done2()
	done2() // twice is harmless
	if err := c.Healthy(); err != nil {
		t.Fatalf("all done: %v", err)
	}
}

// /healthz answers as the kubelet's: "ok"; ?verbose lists the checks; a
// failing check makes it 500 naming the check, its reason withheld;
// /healthz/<name> gives the reason.
func TestInstall(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := New(clk)
	c.Heartbeat("runtime", "containerd", RuntimeThreshold)
	c.Progress("syncloop", "pod sync", SyncLoopThreshold)
	mux := http.NewServeMux()
	c.Install(mux)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/healthz?verbose"); code != 200 || body != "[+]ping ok\n[+]runtime ok\n[+]syncloop ok\nhealthz check passed\n" {
		t.Errorf("/healthz?verbose: %d %q", code, body)
	}
	clk.Step(time.Minute)
	code, body := get("/healthz")
	if code != 500 || !strings.Contains(body, "[-]runtime failed: reason withheld\n") || !strings.Contains(body, "[+]syncloop ok\n") {
		t.Errorf("/healthz with runtime failing: %d %q", code, body)
	}
	if code, body := get("/healthz/runtime"); code != 500 || !strings.Contains(body, "containerd was last seen active 1m0s ago") {
		t.Errorf("/healthz/runtime: %d %q", code, body)
	}
	if code, _ := get("/healthz?exclude=runtime"); code != 200 {
		t.Errorf("/healthz?exclude=runtime: %d", code)
	}
}

func TestProbe(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := New(clk)
	hb := c.Heartbeat("runtime", "containerd", RuntimeThreshold)
	answers := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		hb.Probe(ctx, clk, RuntimePeriod, time.Second, func(context.Context) error { return <-answers })
	}()
	// Failures past the threshold: failing with the probe's error.
	for range 7 {
		answers <- errors.New("frozen")
		clk.Step(RuntimePeriod)
	}
	waitFor(t, func() bool {
		err := c.Healthy()
		return err != nil && strings.Contains(err.Error(), "frozen")
	})
	answers <- nil
	waitFor(t, func() bool { return c.Healthy() == nil })
	cancel()
	clk.Step(RuntimePeriod)
	<-stopped
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 5000 {
			t.Fatal("condition never met")
		}
		time.Sleep(time.Millisecond)
	}
}

package probes

import (
	"context"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
)

var hookPod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}

// An HTTP hook sends the lifecycle User-Agent; an HTTPS hook answered in
// plain HTTP is retried over HTTP.
func TestHTTPHook(t *testing.T) {
	agents := make(chan string, 2)
	target, g := serve(t, func(w http.ResponseWriter, r *http.Request) { agents <- r.UserAgent() })
	h := &v1.LifecycleHandler{HTTPGet: g}
	if msg, err := NewProber().Hook(context.Background(), h, target, hookPod); err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	if ua := <-agents; ua != "kube-lifecycle/1.35" {
		t.Errorf("User-Agent %q", ua)
	}
	g.Scheme = v1.URISchemeHTTPS
	if msg, err := NewProber().Hook(context.Background(), h, target, hookPod); err != nil {
		t.Fatalf("https falling back to http: %s: %v", msg, err)
	}
}

// A sleep hook lasts its seconds on the prober's clock, or until ctx ends
// (the grace period), which is its failure.
func TestSleepHook(t *testing.T) {
	pr := NewProber()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	pr.clock = clk
	target := Target{Container: &v1.Container{Name: "c"}}
	h := &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}
	done := make(chan error, 1)
	go func() { _, err := pr.Hook(context.Background(), h, target, hookPod); done <- err }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("sleep hook: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if msg, err := pr.Hook(ctx, h, target, hookPod); err == nil || msg != `Sleep lifecycle hook (5) for Container "c" in Pod "p_ns(u)" failed - error: container terminated before sleep hook finished` {
		t.Errorf("cut sleep hook: %q %v", msg, err)
	}
}

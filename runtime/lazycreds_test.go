package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// fakeSnapshotter serves a credentials socket as the stargz snapshotter
// does (stale socket removed, listen, chmod) and reports each request.
type fakeSnapshotter struct {
	sock string
	reqs chan map[string]string // PUT /credentials bodies; "synced": PUT /synced
	srv  *http.Server
}

func (f *fakeSnapshotter) start(t *testing.T) {
	t.Helper()
	_ = os.Remove(f.sock)
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.sock, 0o600); err != nil {
		t.Fatal(err)
	}
	f.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := map[string]string{}
		if r.URL.Path == "/synced" {
			m["synced"] = "yes"
		} else {
			_ = json.NewDecoder(r.Body).Decode(&m)
		}
		f.reqs <- m
		w.WriteHeader(http.StatusNoContent)
	})}
	go f.srv.Serve(ln)
}

// A restarted snapshotter is handed the credentials of the images in use
// again, then the end of them; those of images no container uses are not
// sent, and forgotten.
func TestRehandCredentialsOnSnapshotterRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := &fakeSnapshotter{sock: filepath.Join(t.TempDir(), "creds.sock"), reqs: make(chan map[string]string, 16)}
	f.start(t)
	r := &Runtime{snapshotter: "stargz", snapshotterCreds: f.sock}
	creds := func(string) (string, string, error) { return "alice", "pw", nil }
	const inUse, gone, anon = "127.0.0.1:5000/app:v1", "127.0.0.1:5000/old:v1", "127.0.0.1:5000/public:v1"
	for _, ref := range []string{inUse, gone} {
		if opts := r.lazyPullOpts(ctx, ref, creds); len(opts) != 2 {
			t.Fatalf("%s: %d pull options", ref, len(opts))
		}
		<-f.reqs
	}
	r.lazyPullOpts(ctx, anon, nil)
	<-f.reqs

	used := func(context.Context) (map[string]bool, error) {
		return map[string]bool{inUse: true, anon: true}, nil
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- watchSocket(ctx, f.sock, ready, func() { r.rehandCredentials(ctx, used) })
	}()
	<-ready
	// The snapshotter restarts: its socket is made anew.
	f.srv.Close()
	f.start(t)
	defer f.srv.Close()
	var got []map[string]string
	for m := range f.reqs {
		got = append(got, m)
		if m["synced"] != "" {
			break
		}
	}
	if len(got) != 2 || got[0]["ref"] != inUse || got[0]["username"] != "alice" || got[0]["secret"] != "pw" {
		t.Errorf("handed over %v; want %s's credentials, then synced", got, inUse)
	}
	r.held.mu.Lock()
	_, goneHeld := r.held.m[gone]
	anonHeld := r.held.m[anon] != heldEntry{}
	r.held.mu.Unlock()
	if goneHeld {
		t.Errorf("%s's credentials still held, no container uses it", gone)
	}
	if anonHeld {
		t.Errorf("an anonymous pull's image has credentials held")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
}

// A watch that fails is set up again after a back-off, until ctx ends.
func TestRetryWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	clk := testingclock.NewFakeClock(time.Now())
	calls := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- retryWatch(ctx, clk, func() error {
			calls <- struct{}{}
			return errors.New("too many open files")
		})
	}()
	<-calls
	for range 2 { // 1 s, then 2 s
		for !clk.HasWaiters() {
			goruntime.Gosched()
		}
		clk.Step(2 * time.Second)
		<-calls
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("retryWatch after ctx ended: %v", err)
	}
}

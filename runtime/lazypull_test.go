package runtime

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

func TestLazyPullOpts(t *testing.T) {
	ctx := t.Context()
	if opts := (&Runtime{}).lazyPullOpts(ctx, "docker.io/library/busybox:latest", nil); opts != nil {
		t.Errorf("without a snapshotter: %d options, want none", len(opts))
	}

	sock := filepath.Join(t.TempDir(), "creds.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan map[string]string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		_ = json.NewDecoder(r.Body).Decode(&m)
		got <- m
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	r := &Runtime{snapshotter: "stargz", snapshotterCreds: sock}
	var asked string
	creds := func(host string) (string, string, error) { asked = host; return "alice", "pw", nil }
	const ref = "127.0.0.1:5000/app:v1"
	if opts := r.lazyPullOpts(ctx, ref, creds); len(opts) != 2 {
		t.Errorf("%d options, want the snapshotter and the labels handler", len(opts))
	}
	if asked != "127.0.0.1:5000" {
		t.Errorf("credentials asked for host %q, want the image's registry", asked)
	}
	if m := <-got; m["ref"] != ref || m["username"] != "alice" || m["secret"] != "pw" {
		t.Errorf("snapshotter handed %v", m)
	}

	// The snapshotter not answering: a whole pull into the default
	// snapshotter rather than a failed one.
	r.snapshotterCreds = filepath.Join(t.TempDir(), "absent.sock")
	if opts := r.lazyPullOpts(ctx, ref, creds); opts != nil {
		t.Errorf("snapshotter down: %d options, want none", len(opts))
	}
}

package stargz

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestCredentialsSocket(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := filepath.Join(t.TempDir(), "c.sock")
	creds := &Credentials{}
	if err := serveCredentials(ctx, sock, creds); err != nil {
		t.Fatal(err)
	}
	const ref = "registry.example:5000/app:v1"
	if err := SendCredentials(ctx, sock, ref, "alice", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if u, s := creds.Lookup(ref); u != "alice" || s != "s3cret" {
		t.Errorf("Lookup(%s) = %q, %q; want alice, s3cret", ref, u, s)
	}
	if u, s := creds.Lookup("registry.example:5000/other:v1"); u != "" || s != "" {
		t.Errorf("another image's credentials = %q, %q; want none", u, s)
	}
	// An anonymous pull of the same image forgets the old credentials.
	if err := SendCredentials(ctx, sock, ref, "", ""); err != nil {
		t.Fatal(err)
	}
	if u, s := creds.Lookup(ref); u != "" || s != "" {
		t.Errorf("after an anonymous pull: %q, %q; want none", u, s)
	}
	if err := SendCredentials(ctx, sock, "", "u", "p"); err == nil {
		t.Error("an entry without a ref was accepted")
	}
}

// hostlet's PUT /synced ends the start's wait for credentials; without it
// the wait ends on its own.
func TestCredentialsSynced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := filepath.Join(t.TempDir(), "c.sock")
	creds := &Credentials{}
	if err := serveCredentials(ctx, sock, creds); err != nil {
		t.Fatal(err)
	}
	select {
	case <-creds.Synced():
		t.Fatal("synced before hostlet said so")
	default:
	}
	waitSynced(ctx, creds.Synced(), time.Millisecond) // times out, no panic
	for range 2 {                                     // idempotent
		if err := SendSynced(ctx, sock); err != nil {
			t.Fatal(err)
		}
	}
	<-creds.Synced()
	waitSynced(ctx, creds.Synced(), time.Hour) // returns at once
	if hasSnapshots(t.TempDir()) {
		t.Error("an empty root has snapshots to remount")
	}
}

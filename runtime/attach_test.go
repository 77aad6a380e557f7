package runtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Right after a restart, an attach to a container hostlet has not yet
// followed again waits for ResumeLogs instead of failing; once the resume
// is done, an unknown container is not running.
func TestAttachWaitsForResume(t *testing.T) {
	r := &Runtime{resumed: make(chan struct{})}
	adopted := &stdio{id: "adopted"}
	got := make(chan error, 1)
	go func() {
		s, err := r.stdioOf(context.Background(), adopted.id)
		if err == nil && s != adopted {
			err = errors.New("another stdio")
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("returned before the resume: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	adopted.register()
	t.Cleanup(func() { stdios.CompareAndDelete(adopted.id, adopted) })
	r.resumeOnce.Do(func() { close(r.resumed) })
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := r.stdioOf(context.Background(), "unknown"); err == nil {
		t.Fatal("an unknown container after the resume: no error")
	}

	waiting := &Runtime{resumed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := waiting.stdioOf(ctx, "unknown"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a session that ends while waiting: %v", err)
	}
}

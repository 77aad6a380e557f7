package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/cio"
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

// A hostlet does not read the FIFOs of another hostlet's container that
// shares its containerd namespace, nor opens its log.
func TestFIFOAttachRefusesForeign(t *testing.T) {
	open := func() (*stdio, error) {
		t.Fatal("opened the stdio of another hostlet's container")
		return nil, nil
	}
	other := &cio.FIFOSet{Config: cio.Config{Stdout: "/other/root/fifo/c/1/c-stdout"}}
	if _, err := fifoAttach("/root/fifo", open)(other); !errors.Is(err, errForeignFIFOs) {
		t.Fatalf("another hostlet's FIFOs: %v", err)
	}
	// Ours, also when the root dir is named through a symlink.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "real", "fifo", "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	ours := &cio.FIFOSet{Config: cio.Config{Stdout: filepath.Join(root, "real", "fifo", "c", "c-stdout")}}
	if !below(ours.Stdout, realDir(filepath.Join(root, "link", "fifo"))) {
		t.Fatal("a FIFO below the root dir's symlink is not ours")
	}
	// A sibling directory sharing the prefix is not below dir either.
	sibling := &cio.FIFOSet{Config: cio.Config{Stdout: "/root/fifo2/c/1/c-stdout"}}
	if _, err := fifoAttach("/root/fifo", open)(sibling); !errors.Is(err, errForeignFIFOs) {
		t.Fatalf("a sibling directory's FIFOs: %v", err)
	}
}

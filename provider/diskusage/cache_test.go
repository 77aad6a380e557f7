package diskusage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	clocktesting "k8s.io/utils/clock/testing"
)

// layers counts its measurements; each returns the count.
type layers struct{ calls int }

func (l *layers) RootfsUsage(context.Context, string) (runtime.DiskUsage, error) {
	l.calls++
	return runtime.DiskUsage{Bytes: uint64(l.calls)}, nil
}

// The first ask measures at once; later asks get the cached figure until the
// cache's own round measures again; what no one asked for in two periods is
// forgotten.
func TestCache(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := &layers{}
	c := New(l, time.Minute, clk)
	ctx := context.Background()
	dir := t.TempDir()

	if u, _ := c.RootfsUsage(ctx, "c1"); u.Bytes != 1 {
		t.Fatalf("first ask: %d, want 1 (measured at once)", u.Bytes)
	}
	empty, err := c.DirUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Step(30 * time.Second)
	if u, _ := c.RootfsUsage(ctx, "c1"); u.Bytes != 1 || l.calls != 1 {
		t.Fatalf("cached ask: %d after %d measurements, want 1 after 1", u.Bytes, l.calls)
	}
	if u, _ := c.DirUsage(dir); u != empty {
		t.Fatalf("cached dir: %+v, want the first figure %+v", u, empty)
	}

	clk.Step(31 * time.Second)
	c.refresh(ctx)
	if u, _ := c.RootfsUsage(ctx, "c1"); u.Bytes != 2 {
		t.Fatalf("after a round: %d, want 2", u.Bytes)
	}
	if u, _ := c.DirUsage(dir); u.Bytes < 64<<10 || u.Inodes != empty.Inodes+1 {
		t.Fatalf("dir after a round: %+v, want the file counted (was %+v)", u, empty)
	}

	clk.Step(3 * time.Minute)
	c.refresh(ctx)
	if len(c.entries) != 0 {
		t.Fatalf("entries no one asked for in two periods kept: %v", c.entries)
	}
}

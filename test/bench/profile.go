package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/hostlet/hostlet/test/images"
)

// profileHook is compiled into hostlet's main package for -profile runs
// only (go build -overlay: the checkout is not touched, and hostlet has no
// profiling flag of its own). SIGUSR1 starts a CPU profile and snapshots the
// block and mutex profiles; SIGUSR2 stops the CPU profile, snapshots them
// again (and the heap) and writes "done". The block and mutex profiles are cumulative: the
// window is the difference (go tool pprof -diff_base).
const profileHook = `package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
)

func init() {
	dir := os.Getenv("HOSTLET_BENCH_PROFILE_DIR")
	if dir == "" {
		return
	}
	runtime.SetBlockProfileRate(10000)
	runtime.SetMutexProfileFraction(10)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var cpu *os.File
		snap := func(suffix string) {
			for _, p := range []string{"block", "mutex", "goroutine", "heap"} {
				if f, err := os.Create(filepath.Join(dir, p+suffix+".pprof")); err == nil {
					pprof.Lookup(p).WriteTo(f, 0)
					f.Close()
				}
			}
		}
		for s := range ch {
			switch {
			case s == syscall.SIGUSR1 && cpu == nil:
				snap("-0")
				if f, err := os.Create(filepath.Join(dir, "cpu.pprof")); err == nil && pprof.StartCPUProfile(f) == nil {
					cpu = f
				}
			case s == syscall.SIGUSR2 && cpu != nil:
				pprof.StopCPUProfile()
				cpu.Close()
				cpu = nil
				snap("-1")
				os.WriteFile(filepath.Join(dir, "done"), nil, 0o644)
			}
		}
	}()
}
`

// profiler drives the hook in one hostlet process.
type profiler struct {
	dir string
	pid int
}

// buildProfilingHostlet builds ./cmd/hostlet with profileHook added, into
// out.
func buildProfilingHostlet(ctx context.Context, root, out string) error {
	dir, err := os.MkdirTemp("", "hostlet-bench-overlay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	hook := filepath.Join(dir, "bench_profile.go")
	if err := os.WriteFile(hook, []byte(profileHook), 0o644); err != nil {
		return err
	}
	ov, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, "cmd", "hostlet", "zz_bench_profile.go"): hook},
	})
	if err != nil {
		return err
	}
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags="+images.HostletTags, "-overlay", ovPath, "-o", out, "./cmd/hostlet")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build (profiling) ./cmd/hostlet: %w\n%s", err, b)
	}
	return nil
}

// begin starts a profiling window.
func (p *profiler) begin() error {
	if p == nil {
		return nil
	}
	os.Remove(filepath.Join(p.dir, "done"))
	return syscall.Kill(p.pid, syscall.SIGUSR1)
}

// end stops the window and moves its profiles to <dir>/<label>-*.pprof.
func (p *profiler) end(label string) error {
	if p == nil {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGUSR2); err != nil {
		return err
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(p.dir, "done")); err == nil {
			break
		}
		if i == 100 {
			return fmt.Errorf("hostlet wrote no profile to %s", p.dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, f := range []string{"cpu", "block-0", "block-1", "mutex-0", "mutex-1", "goroutine-0", "goroutine-1", "heap-0", "heap-1"} {
		if err := os.Rename(filepath.Join(p.dir, f+".pprof"), filepath.Join(p.dir, label+"-"+f+".pprof")); err != nil {
			return err
		}
	}
	log.Infof("profiles of %s in %s/%s-*.pprof", label, p.dir, label)
	return nil
}

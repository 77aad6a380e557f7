package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child daemon (etcd, apiserver, containerd, hostlet, ...)
// running in its own process group with its output in a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been reaped
	err     error         // Wait's result, valid after done is closed

	// swept is set once the group got its final SIGKILL after the leader
	// exited; later calls must not signal a group id that may be reused.
	swept sync.Once
}

// spawnReq asks the spawner thread to start a command.
type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// spawn starts cmd from one dedicated, locked OS thread that never exits.
// Pdeathsig fires when the *thread* that forked the child dies, not the
// process; Go may retire threads (e.g. a test goroutine that exits while
// locked after switching network namespaces), which would SIGKILL our daemons
// at random. Forking from an immortal thread makes Pdeathsig mean "the test
// process died", which is what we want.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawnCh {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, res: res}
	return <-res
}

// startProcess launches bin with args, stdout and stderr appended to logPath.
// The child gets its own process group (so Stop can signal everything it
// forked) and dies with us (Pdeathsig) unless pdeath is false.
func startProcess(name, logPath string, env []string, pdeath bool, bin string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if pdeath {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := spawn(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup signals the whole process group; the leader's pid is the pgid.
func (p *process) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-p.pid(), sig)
}

// stop sends SIGTERM to the group, then SIGKILL after grace. Waits for the
// leader to be reaped and then makes sure no group member survives.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	if !p.exited() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			p.signalGroup(syscall.SIGKILL)
			<-p.done
		}
	}
	p.sweep()
}

// sweep kills group members that outlived the leader, once.
func (p *process) sweep() {
	p.swept.Do(func() { p.signalGroup(syscall.SIGKILL) })
}

// kill sends SIGKILL to the group and waits for the leader.
func (p *process) kill() {
	if p == nil {
		return
	}
	if !p.exited() {
		p.signalGroup(syscall.SIGKILL)
		<-p.done
	}
	p.sweep()
}

// failure wraps err with the process's log tail so that a failed start can
// be diagnosed from the test output alone.
func (p *process) failure(err error) error {
	return fmt.Errorf("%s: %w\n--- last lines of %s ---\n%s", p.name, err, p.logPath, tail(p.logPath, 40))
}

// waitFor polls check until it succeeds, the process dies or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, interval time.Duration, check func(context.Context) error) error {
	var last error
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.failure(fmt.Errorf("exited (%v) while waiting for %s", p.err, what))
		case <-ctx.Done():
			return p.failure(fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last))
		case <-t.C:
		}
	}
}

// tail returns the last n lines of a file (looking at its last 64 KiB only:
// logs at --v 4 get big).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// pidAlive reports whether pid exists (and is not a zombie we could reap).
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Process is a daemon started outside a Cluster with StartProcess (test/bench
// runs the upstream kubelet and its CRI containerd with it), with the same
// process group, Pdeathsig and log handling as the harness's own daemons.
type Process struct{ p *process }

// StartProcess starts bin with args in its own process group, output
// appended to logPath, and SIGKILLed if this process dies.
func StartProcess(name, logPath string, env []string, bin string, args ...string) (*Process, error) {
	p, err := startProcess(name, logPath, env, true, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// Pid of the group leader.
func (p *Process) Pid() int { return p.p.pid() }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.p.done }

// Stop sends SIGTERM to the group, SIGKILL after grace, and SIGKILL to any
// member that outlived the leader. Safe on a nil or exited Process.
func (p *Process) Stop(grace time.Duration) {
	if p != nil {
		p.p.stop(grace)
	}
}

// WaitFor polls check every interval until it succeeds; it fails with the
// end of the process's log if the process exits or ctx ends first.
func (p *Process) WaitFor(ctx context.Context, what string, interval time.Duration, check func(context.Context) error) error {
	return p.p.waitFor(ctx, what, interval, check)
}

// Failure wraps err with the end of the process's log.
func (p *Process) Failure(err error) error { return p.p.failure(err) }

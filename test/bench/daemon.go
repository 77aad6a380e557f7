package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// daemon is a long-running process this program started (the kubelet and its
// CRI containerd). It runs in its own process group, so stopping it reaches
// whatever it forked, and Pdeathsig takes it down if the benchmark dies.
type daemon struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startDaemon(name, logPath string, env []string, bin string, args ...string) (*daemon, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = f, f, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the group, SIGKILL after grace, and then SIGKILL to
// any group member that outlived the leader. Safe on a nil or exited daemon.
func (d *daemon) stop(grace time.Duration) {
	if d == nil {
		return
	}
	if !d.exited() {
		_ = syscall.Kill(-d.pid(), syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(grace):
			_ = syscall.Kill(-d.pid(), syscall.SIGKILL)
			<-d.done
		}
	}
	_ = syscall.Kill(-d.pid(), syscall.SIGKILL)
}

// waitFor polls check every interval until it succeeds, the daemon exits or
// the timeout passes; failures carry the end of the daemon's log.
func (d *daemon) waitFor(what string, timeout, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if d.exited() {
			return fmt.Errorf("%s exited while waiting for %s (last error: %v); log %s:\n%s", d.name, what, err, d.log, logTail(d.log))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: timed out waiting for %s (last error: %v); log %s:\n%s", d.name, what, err, d.log, logTail(d.log))
		}
		time.Sleep(interval)
	}
}

// logTail is the last ~30 lines of a log, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

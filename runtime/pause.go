package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// pauseArg is the argument that turns hostlet into a pod's PID 1.
const pauseArg = "pause"

// RunPause is PID 1 of a pod with shareProcessNamespace: a PID namespace
// lives only as long as its first process. It reaps the orphans of the
// pod's containers and otherwise sleeps; only SIGKILL from the host ends it.
func RunPause() {
	enterPauseRoot()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	for range sigs {
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// startPause starts the pod's PID 1 in a new PID namespace, detached from
// hostlet so it survives a restart of hostlet. dir is passed only to show
// whose it is (and lets leftovers be found by path).
func (r *Runtime) startPause(dir string) (int, error) {
	cmd := exec.Command(r.executable, pauseArg, dir)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID, Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting the pod's PID namespace holder: %w", err)
	}
	pid := cmd.Process.Pid
	// Reap it whenever it ends while this hostlet is its parent.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// pauseAlive reports whether pid is still the pause process of dir.
func pauseAlive(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return len(args) == 3 && args[1] == pauseArg && args[2] == dir
}

func stopPause(pid int, dir string) {
	if pauseAlive(pid, dir) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

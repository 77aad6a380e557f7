package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as testapp when this variable is set, so process
// level behaviour (exit codes, signals) is tested without a separate build.
const asTestapp = "TESTAPP_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asTestapp) != "" {
		os.Args = append([]string{"testapp"}, strings.Fields(os.Getenv(asTestapp))...)
		main()
		return
	}
	stdout = io.Discard
	os.Exit(m.Run())
}

func testapp(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), asTestapp+"="+strings.Join(args, " "), "TESTAPP_MARKER=m1")
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return ee.ExitCode()
}

func TestStartupActionsAndExitCode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a/b/c.txt")
	out, err := testapp(t, "--write="+path+"=hi", "--print-env", "--log=started", "--exit-code=5").Output()
	if code := exitCode(t, err); code != 5 {
		t.Fatalf("exit code %d, want 5", code)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hi" {
		t.Errorf("written file = %q, %v", b, err)
	}
	s := string(out)
	if !strings.Contains(s, "\nTESTAPP_MARKER=m1\n") || !strings.HasSuffix(s, "\nstarted\n") {
		t.Errorf("output:\n%s", s)
	}
}

func TestSleepThenExit(t *testing.T) {
	start := time.Now()
	err := testapp(t, "--sleep=300ms", "--exit-code=3").Run()
	if code := exitCode(t, err); code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("exited after %v", d)
	}
}

// startLogging starts testapp and returns a channel of its stdout lines.
func startLogging(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := testapp(t, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

func waitLine(t *testing.T, lines <-chan string, suffix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before %q", suffix)
			}
			if strings.HasSuffix(l, suffix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line ending in %q", suffix)
		}
	}
}

func TestSignalsLoggedAndTermExitCode(t *testing.T) {
	cmd, lines := startLogging(t, "--signals", "--term-delay=200ms", "--term-exit-code=7", "--log=ready")
	waitLine(t, lines, "ready")
	cmd.Process.Signal(syscall.SIGTERM)
	l := waitLine(t, lines, " signal: SIGTERM")
	ts, _, _ := strings.Cut(l, " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("timestamp %q: %v", ts, err)
	}
	// Signals keep being logged during the delay.
	cmd.Process.Signal(syscall.SIGUSR2)
	waitLine(t, lines, " signal: SIGUSR2")
	if code := exitCode(t, cmd.Wait()); code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
}

func TestIgnoreTerm(t *testing.T) {
	cmd, lines := startLogging(t, "--signals", "--ignore-term", "--log=ready")
	waitLine(t, lines, "ready")
	cmd.Process.Signal(syscall.SIGTERM)
	waitLine(t, lines, " signal: SIGTERM")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("exited on SIGTERM: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGUSR1)
	if code := exitCode(t, <-done); code != 0 {
		t.Fatalf("exit code after SIGUSR1 %d, want 0", code)
	}
}

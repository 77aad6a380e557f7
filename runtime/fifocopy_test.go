package runtime

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// The copies take what the shim writes into the FIFOs (in pieces, larger
// than a read buffer, with pauses that park them in the poller) into the
// log, and attached input into the stdin FIFO, until the shim closes its
// ends.
func TestFIFOCopy(t *testing.T) {
	dir := t.TempDir()
	sink, err := newLogSink(filepath.Join(dir, "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	st := newStdio("c", map[string]string{labelStdin: "true"}, sink)
	cio, err := st.fifoCreator(filepath.Join(dir, "fifo"))("c")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cio.Config()
	// The shim's ends.
	stdin, err := os.OpenFile(cfg.Stdin, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := os.OpenFile(cfg.Stdout, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.OpenFile(cfg.Stderr, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 40<<10)
	for _, s := range []string{"hello\n", long[:20<<10], long[20<<10:] + "\n"} {
		if _, err := stdout.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stderr.WriteString("oops\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.stdinW.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	in := make([]byte, 6)
	if _, err := io.ReadFull(stdin, in); err != nil || string(in) != "typed\n" {
		t.Fatalf("stdin FIFO read %q, %v", in, err)
	}
	// What follows the copies runs once, when the last of them ends
	// (before Wait returns), or at once when given after that.
	var ran atomic.Int32
	f := cio.(*fifoIO)
	f.whenEnded(func() { ran.Add(1) })
	if n := ran.Load(); n != 0 {
		t.Fatalf("ran %d times before the shim closed its ends", n)
	}
	stdout.Close()
	stderr.Close()
	cio.Wait()
	if n := ran.Load(); n != 1 {
		t.Errorf("ran %d times once the copies ended, want 1", n)
	}
	f.whenEnded(func() { ran.Add(1) })
	if n := ran.Load(); n != 2 {
		t.Errorf("given after the copies ended: ran %d times in all, want 2", n)
	}
	st.close()
	sink.close()
	if err := cio.Close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Dir(cfg.Stdout)); !os.IsNotExist(err) {
		t.Errorf("FIFO dir left after Close: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		rec, ok := parseLogLine([]byte(line))
		if !ok {
			t.Fatalf("bad log line %q", line)
		}
		w := &out
		if rec.stream == "stderr" {
			w = &errOut
		}
		w.Write(rec.content)
		if !rec.partial {
			w.WriteByte('\n')
		}
	}
	if want := "hello\n" + long + "\n"; out.String() != want {
		t.Errorf("stdout: %d bytes, want %d", out.Len(), len(want))
	}
	if errOut.String() != "oops\n" {
		t.Errorf("stderr: %q", errOut.String())
	}
}

// Cancel ends the copies of a task whose shim never closes its ends (a
// task that failed to start, or was deleted).
func TestFIFOCopyCancel(t *testing.T) {
	dir := t.TempDir()
	sink, err := newLogSink(filepath.Join(dir, "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	st := newStdio("c", map[string]string{labelTTY: "true"}, sink)
	defer st.close()
	cio, err := st.fifoCreator(filepath.Join(dir, "fifo"))("c")
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := os.OpenFile(cio.Config().Stdout, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cio.Cancel()
	cio.Wait()
	if err := cio.Close(); err != nil {
		t.Error(err)
	}
}

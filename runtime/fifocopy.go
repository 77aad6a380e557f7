package runtime

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
)

// fifoIO is a container's cio.IO: containerd's FIFOs (the shim writes the
// output into them, as for CRI), copied by hostlet. containerd's own copy
// (cio.NewCreator) holds a 32 KiB buffer per stream for the container's
// whole life, parked in a read of a mostly idle container: 2 MiB for 30
// pods. This one waits in the poller without a buffer and borrows one per
// read.
type fifoIO struct {
	d *cio.DirectIO

	// The last output copy to end runs ended (whenEnded), then closes
	// done (Wait): no goroutine per container waits for them (one in five
	// of a probed pod's).
	mu    sync.Mutex
	left  int
	ended func()
	done  chan struct{}
}

// outputBufs lend the output copies their read buffers, for one read
// and its write each.
var outputBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// fifoCreator makes the stdio of a new task in FIFOs under dir.
func (s *stdio) fifoCreator(dir string) cio.Creator {
	return func(id string) (cio.IO, error) {
		fifos, err := cio.NewFIFOSetInDir(dir, id, s.tty)
		if err != nil {
			return nil, err
		}
		return s.openFIFOs(fifos)
	}
}

// errForeignFIFOs: the task's FIFOs are not under this hostlet's root dir.
var errForeignFIFOs = errors.New("the task's FIFOs belong to another hostlet")

// fifoAttach connects to the FIFOs of a task that is already running,
// made under dir (realDir): open makes the stdio they are copied to, once
// they are known to be ours. A task whose FIFOs are elsewhere is another
// hostlet's sharing the containerd namespace (nodes on one host, as in the
// e2e tests): reading its FIFOs would take that hostlet's output.
func fifoAttach(dir string, open func() (*stdio, error)) cio.Attach {
	return func(fifos *cio.FIFOSet) (cio.IO, error) {
		if fifos == nil {
			return nil, errors.New("cannot attach, missing fifos")
		}
		for _, p := range []string{fifos.Stdin, fifos.Stdout, fifos.Stderr} {
			if p != "" && !below(p, dir) {
				return nil, errForeignFIFOs
			}
		}
		s, err := open()
		if err != nil {
			return nil, err
		}
		return s.openFIFOs(fifos)
	}
}

// realDir is dir with its symlinks resolved (as given if that fails).
func realDir(dir string) string {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		return d
	}
	return dir
}

// below says whether the file p is below dir (realDir), also when p is
// named through a symlink (a root dir given another way since the task
// was made): a FIFO of ours is never taken for another hostlet's.
func below(p, dir string) bool {
	p = filepath.Join(realDir(filepath.Dir(p)), filepath.Base(p))
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// openFIFOs opens hostlet's ends of the FIFOs (without waiting for the
// shim's) and starts the copies: stdin from the attached sessions, stdout
// and stderr (one stream with a TTY) into the log and the sessions.
func (s *stdio) openFIFOs(fifos *cio.FIFOSet) (cio.IO, error) {
	if s.stdinR == nil {
		fifos.Stdin = ""
	}
	d, err := cio.NewDirectIO(context.Background(), fifos)
	if err != nil {
		return nil, err
	}
	f := &fifoIO{d: d}
	if d.Stdin != nil {
		go func() {
			defer crash.Recover(log.WithField("container", s.id), nil)
			_, _ = io.Copy(d.Stdin, s.stdinR)
			_ = d.Stdin.Close()
		}()
	}
	type output struct {
		w io.Writer
		r io.ReadCloser
	}
	var outputs []output
	for _, c := range []output{{s.stdout, d.Stdout}, {s.stderr, d.Stderr}} {
		if c.r != nil {
			outputs = append(outputs, c)
		}
	}
	// Both counted before either starts: a copy that ends at once (the
	// shim's end closed already) is not taken for the last.
	f.left, f.done = len(outputs), make(chan struct{})
	if f.left == 0 {
		close(f.done)
	}
	for _, c := range outputs {
		go func() {
			// Recovers from a panic in the copy or in what the last copy
			// runs when it ends.
			defer crash.Recover(log.WithField("container", s.id), nil)
			defer f.copyEnded()
			copyOutput(c.w, c.r)
			_ = c.r.Close()
		}()
	}
	return f, nil
}

// copyEnded counts an output copy's end; the last one runs what
// whenEnded was given.
func (f *fifoIO) copyEnded() {
	f.mu.Lock()
	f.left--
	last, run := f.left == 0, f.ended
	f.mu.Unlock()
	if !last {
		return
	}
	defer close(f.done)
	if run != nil {
		run()
	}
}

// whenEnded has fn run once both output copies have ended: by the last
// copy, or now if they have.
func (f *fifoIO) whenEnded(fn func()) {
	f.mu.Lock()
	if f.left > 0 {
		f.ended = fn
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	fn()
}

// copyOutput copies r, a FIFO, into w until the shim closes its end or
// hostlet closes r. A buffer is taken only once r is readable.
func copyOutput(w io.Writer, r io.Reader) {
	sc, ok := r.(syscall.Conn)
	if !ok {
		_, _ = io.Copy(w, r)
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	for {
		var (
			buf  *[]byte
			n    int
			rerr error
		)
		err := raw.Read(func(fd uintptr) bool {
			buf = outputBufs.Get().(*[]byte)
			for {
				n, rerr = syscall.Read(int(fd), *buf)
				if rerr != syscall.EINTR {
					break
				}
			}
			if rerr == syscall.EAGAIN {
				// Nothing yet: wait for the poller without the buffer.
				outputBufs.Put(buf)
				buf = nil
				return false
			}
			return true
		})
		var werr error
		if buf != nil {
			if rerr == nil && n > 0 {
				_, werr = w.Write((*buf)[:n])
			}
			outputBufs.Put(buf)
		}
		// n == 0: the shim closed its end (EOF). A write error ends the
		// copy, as containerd's does.
		if err != nil || rerr != nil || n <= 0 || werr != nil {
			return
		}
	}
}

func (f *fifoIO) Config() cio.Config { return f.d.Config() }

// Wait returns once both output copies have ended.
func (f *fifoIO) Wait() { <-f.done }

// Cancel stops opening the FIFOs and closes hostlet's ends, as
// containerd's copy does: a task deleted (or failed to start) ends its
// copies.
func (f *fifoIO) Cancel() {
	f.d.Cancel()
	for _, c := range []io.Closer{f.d.Stdin, f.d.Stdout, f.d.Stderr} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// Close closes hostlet's ends and removes the FIFOs.
func (f *fifoIO) Close() error { return f.d.Close() }

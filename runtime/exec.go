package runtime

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
)

// ExecIO carries the streams of an exec session.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	// Resize receives terminal size changes while TTY is set.
	Resize <-chan TermSize
}

type TermSize struct{ Width, Height uint16 }

// Exec runs cmd in a running container and returns its exit code. It ends
// when the process exits or ctx is cancelled (then the process is killed).
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, eio ExecIO) (int, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return -1, err
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return -1, fmt.Errorf("container %s is not running: %w", id, err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return -1, err
	}
	pspec := *spec.Process
	pspec.Args = cmd
	pspec.Terminal = eio.TTY
	if eio.TTY {
		pspec.Env = append(append([]string{}, pspec.Env...), "TERM=xterm")
	}
	var stdin io.Reader
	closer := &stdinCloser{}
	if eio.Stdin != nil {
		closer.r = eio.Stdin
		stdin = closer
	}
	opts := []cio.Opt{cio.WithStreams(stdin, eio.Stdout, eio.Stderr)}
	if eio.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	execID := "exec-" + newID()[:16]
	proc, err := task.Exec(ctx, execID, &pspec, cio.NewCreator(opts...))
	if err != nil {
		return -1, err
	}
	defer func() { _, _ = proc.Delete(context.WithoutCancel(ctx), containerd.WithProcessKill) }()
	closer.set(func() { _ = proc.CloseIO(context.WithoutCancel(ctx), containerd.WithStdinCloser) })
	exited, err := proc.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return -1, err
	}
	if err := proc.Start(ctx); err != nil {
		return -1, err
	}
	if eio.TTY && eio.Resize != nil {
		// The caller's channel may never be closed: the resizer ends with
		// the session.
		done := make(chan struct{})
		defer close(done)
		go func() {
			defer crash.Recover(log.WithField("container", id), nil)
			for {
				select {
				case sz, ok := <-eio.Resize:
					if !ok {
						return
					}
					_ = proc.Resize(ctx, uint32(sz.Width), uint32(sz.Height))
				case <-done:
					return
				}
			}
		}()
	}
	select {
	case st := <-exited:
		proc.IO().Wait()
		return int(st.ExitCode()), nil
	case <-ctx.Done():
		_ = proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		<-exited
		return -1, ctx.Err()
	}
}

// stdinCloser closes the process's stdin once the client's stream ends, so
// `cat` and shells see EOF, as with the kubelet.
type stdinCloser struct {
	r    io.Reader
	mu   sync.Mutex
	done bool
	fn   func()
}

func (s *stdinCloser) set(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fn = fn
	if s.done {
		fn()
	}
}

func (s *stdinCloser) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil {
		s.mu.Lock()
		if !s.done && s.fn != nil {
			s.fn()
		}
		s.done = true
		s.mu.Unlock()
	}
	return n, err
}

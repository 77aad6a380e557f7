package runtime

import (
	"context"
	"fmt"
	"io"
	"sync"

	containerd "github.com/containerd/containerd/v2/client"
	cioutil "github.com/containerd/containerd/v2/pkg/ioutil"
	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
)

// Labels with a container's stdio as its pod spec asks for it, so an
// adopted container gets the same after a restart of hostlet.
const (
	labelStdin     = "hostlet.stdin"
	labelStdinOnce = "hostlet.stdin-once"
	labelTTY       = "hostlet.tty"
	// labelStdinClosed marks a stdinOnce container whose first attach
	// has ended: its stdin stays closed.
	labelStdinClosed = "hostlet.stdin-closed"
)

// stdioLabels are the labels of cfg's stdin and TTY settings.
func stdioLabels(cfg ContainerConfig) map[string]string {
	l := map[string]string{}
	if cfg.Stdin {
		l[labelStdin] = "true"
	}
	if cfg.StdinOnce {
		l[labelStdinOnce] = "true"
	}
	if cfg.TTY {
		l[labelTTY] = "true"
	}
	return l
}

// stdio is the input and output of one running container that hostlet
// copies, as containerd's CRI plugin does: the output into the log and into
// every attached session, attached sessions' input into the container.
type stdio struct {
	id             string
	tty, stdinOnce bool
	stdout, stderr *cioutil.WriterGroup
	// stdinR feeds the container's stdin FIFO; sessions write into stdinW.
	// Both nil for a container without stdin.
	stdinR    *io.PipeReader
	stdinW    *io.PipeWriter
	closeOnce sync.Once
	stdinMu   sync.Mutex
	stdinShut bool
}

// stdios holds the stdio of the containers whose output hostlet follows.
var stdios sync.Map // container id -> *stdio

// newStdio makes the stdio of a container from its labels, its output
// going to sink; it has a stdin unless the container has none or had it
// closed for good (stdinOnce).
func newStdio(id string, labels map[string]string, sink *logSink) *stdio {
	s := &stdio{
		id:        id,
		tty:       labels[labelTTY] == "true",
		stdinOnce: labels[labelStdinOnce] == "true",
		stdout:    cioutil.NewWriterGroup(),
		stderr:    cioutil.NewWriterGroup(),
	}
	// The log is always a member, so the group never runs empty (an empty
	// group fails the copy from the container).
	s.stdout.Add("log", cioutil.NewNopWriteCloser(sink.out))
	s.stderr.Add("log", cioutil.NewNopWriteCloser(sink.err))
	if labels[labelStdin] == "true" && labels[labelStdinClosed] != "true" {
		s.stdinR, s.stdinW = io.Pipe()
	} else {
		s.stdinShut = true
	}
	return s
}

// register makes s the stdio attach sessions find for its container.
func (s *stdio) register() { stdios.Store(s.id, s) }

// close ends every attached session and the copy into the container's
// stdin, once the container's output has ended.
func (s *stdio) close() {
	s.closeOnce.Do(func() {
		stdios.CompareAndDelete(s.id, s)
		// The container has exited: nothing to close for stdinOnce.
		s.stdinMu.Lock()
		s.stdinShut = true
		s.stdinMu.Unlock()
		s.stdout.Close()
		s.stderr.Close()
		if s.stdinW != nil {
			_ = s.stdinW.Close()
		}
	})
}

// shutStdin closes the container's stdin for good (stdinOnce): hostlet's
// end of the FIFO and the shim's, which holds the FIFO open for writing so
// that the process sees EOF only when told; the label keeps it closed for
// an adopted container.
func (s *stdio) shutStdin(ctx context.Context, c containerd.Container, task containerd.Task) {
	s.stdinMu.Lock()
	defer s.stdinMu.Unlock()
	if s.stdinShut {
		return
	}
	s.stdinShut = true
	ctx = context.WithoutCancel(ctx)
	_ = s.stdinW.Close()
	if err := task.CloseIO(ctx, containerd.WithStdinCloser); err != nil {
		log.WithError(err).WithField("container", s.id).Warn("closing stdin after the first attach")
	}
	if _, err := c.SetLabels(ctx, map[string]string{labelStdinClosed: "true"}); err != nil {
		log.WithError(err).WithField("container", s.id).Warn("recording closed stdin")
	}
}

func (s *stdio) stdinOpen() bool {
	s.stdinMu.Lock()
	defer s.stdinMu.Unlock()
	return !s.stdinShut
}

// stdioOf is the stdio of a running container. Right after a restart,
// an unknown container may be one that outlived the last hostlet, whose
// output ResumeLogs has yet to follow again: the session waits for it
// rather than fail with a container that runs.
func (r *Runtime) stdioOf(ctx context.Context, id string) (*stdio, error) {
	if _, ok := stdios.Load(id); !ok {
		select {
		case <-r.resumed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	v, ok := stdios.Load(id)
	if !ok {
		return nil, fmt.Errorf("container %s is not running", id)
	}
	return v.(*stdio), nil
}

// Attach connects a session to a running container's stdio, as the
// kubelet's attach does through CRI: the session sees the output from now
// on (not the past: that is in the log), its input goes to the
// container's stdin if the container has one, and resizes go to its TTY.
// It returns when the session ends: the client goes (ctx), the container
// exits, or the session's stdin ends (then, for a stdinOnce container, the
// container's stdin is closed; without a TTY the output keeps flowing to
// the session until the container exits, as kubectl expects).
func (r *Runtime) Attach(ctx context.Context, id string, eio ExecIO) error {
	s, err := r.stdioOf(ctx, id)
	if err != nil {
		return err
	}
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return fmt.Errorf("container %s is not running: %w", id, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := log.WithField("container", id)
	if s.tty && eio.Resize != nil {
		go func() {
			defer crash.Recover(l, nil)
			for {
				select {
				case sz, ok := <-eio.Resize:
					if !ok {
						return
					}
					if err := task.Resize(ctx, uint32(sz.Width), uint32(sz.Height)); err != nil {
						l.WithError(err).Debug("resizing the terminal")
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	key := "attach-" + newID()[:16]
	var wg sync.WaitGroup
	// stdinRC stops the copy of the session's input when the session ends;
	// the session's own stream is closed by the streaming server.
	var stdinRC io.ReadCloser
	if eio.Stdin != nil && s.stdinOpen() {
		stdinRC = cioutil.NewWrapReadCloser(eio.Stdin)
	}
	// A session's writers are never closed here: the streaming server
	// closes its streams when the session ends.
	follow := func(g *cioutil.WriterGroup, w io.Writer) {
		wc, closed := cioutil.NewWriteCloseInformer(cioutil.NewNopWriteCloser(w))
		g.Add(key, wc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer crash.Recover(l, nil)
			select {
			case <-closed:
			case <-ctx.Done():
				g.Remove(key)
			}
			if stdinRC != nil {
				_ = stdinRC.Close()
			}
		}()
	}
	if eio.Stdout != nil {
		follow(s.stdout, eio.Stdout)
	}
	if eio.Stderr != nil && !s.tty {
		follow(s.stderr, eio.Stderr)
	}
	// The input is copied only once the session follows the output: what
	// the container answers to it (a shell's prompt, an echo) reaches the
	// session.
	if stdinRC != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer crash.Recover(l, nil)
			if _, err := io.Copy(s.stdinW, stdinRC); err != nil {
				l.WithError(err).Debug("copying attached input")
			}
			if s.stdinOnce {
				s.shutStdin(ctx, c, task)
				if !s.tty {
					return
				}
			}
			s.stdout.Remove(key)
			s.stderr.Remove(key)
		}()
	}
	if eio.Stdout == nil && (eio.Stderr == nil || s.tty) && stdinRC != nil {
		// Input only: the session ends with the client.
		go func() {
			defer crash.Recover(l, nil)
			<-ctx.Done()
			_ = stdinRC.Close()
		}()
	}
	wg.Wait()
	return nil
}

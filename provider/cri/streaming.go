package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	"k8s.io/client-go/tools/remotecommand"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/cri/streaming"
	utilexec "k8s.io/utils/exec"
)

// Exec, Attach and PortForward answer a URL on a streaming server, as
// containerd's CRI does: the kubelet's streaming server library (SPDY and
// websocket) on loopback at a port of its own, plain HTTP, as containerd's
// default stream_server_address 127.0.0.1 and port 0. The server asks no
// credentials, as containerd's: a URL's random token is the authority,
// given only to root (through the socket), good for one session within a
// minute. The session itself runs through hostlet's runtime: the exec and
// attach of the kubelet API's, the pod's network namespace for port
// forwarding.

// startStreams listens on loopback and serves the streaming server until
// ctx ends.
func startStreams(ctx context.Context, s *server) (streaming.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = ln.Addr().String()
	// The URLs name the port listened on: the library's own Start would
	// learn it only once serving, after the first URLs could be made.
	cfg.BaseURL = &url.URL{Scheme: "http", Host: cfg.Addr}
	streams, err := streaming.NewServer(cfg, streamRuntime{s})
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: streams, ReadHeaderTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("CRI streaming server stopped")
		}
	}()
	log.WithField("address", cfg.Addr).Info("serving CRI streams (exec, attach, port-forward)")
	return streams, nil
}

// Exec gives the URL of an exec session into a running container of a pod
// (crictl exec without --sync, crictl exec -it), as containerd's CRI.
func (s *server) Exec(ctx context.Context, r *criapi.ExecRequest) (*criapi.ExecResponse, error) {
	id, err := s.runningContainer(ctx, r.GetContainerId())
	if err != nil {
		return nil, err
	}
	req := proto.Clone(r).(*criapi.ExecRequest)
	req.ContainerId = id
	return s.streams.GetExec(req)
}

// Attach gives the URL of a session joining a running container's own
// stdio (crictl attach), as containerd's CRI.
func (s *server) Attach(ctx context.Context, r *criapi.AttachRequest) (*criapi.AttachResponse, error) {
	id, err := s.runningContainer(ctx, r.GetContainerId())
	if err != nil {
		return nil, err
	}
	req := proto.Clone(r).(*criapi.AttachRequest)
	req.ContainerId = id
	return s.streams.GetAttach(req)
}

// PortForward gives the URL of port forwarding into a ready sandbox
// (crictl port-forward), as containerd's CRI: its ports are not checked
// against the pod's.
func (s *server) PortForward(ctx context.Context, r *criapi.PortForwardRequest) (*criapi.PortForwardResponse, error) {
	p, err := s.sandbox(ctx, r.GetPodSandboxId())
	if err != nil {
		return nil, fmt.Errorf("failed to find sandbox %q: %w", r.GetPodSandboxId(), err)
	}
	if p.state() != criapi.PodSandboxState_SANDBOX_READY {
		return nil, errors.New("sandbox container is not running")
	}
	req := proto.Clone(r).(*criapi.PortForwardRequest)
	req.PodSandboxId = sandboxID(p.uid)
	return s.streams.GetPortForward(req)
}

// runningContainer is the full id of a running container of a pod that id
// names (or is a prefix of); containerd's words otherwise.
func (s *server) runningContainer(ctx context.Context, id string) (string, error) {
	st, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return "", err
	}
	if st.Status.State != criapi.ContainerState_CONTAINER_RUNNING {
		return "", fmt.Errorf("container is in %s state", st.Status.State.String())
	}
	return st.Status.Id, nil
}

// streamRuntime runs the streaming server's sessions with hostlet's
// runtime.
type streamRuntime struct{ s *server }

// Exec's non-zero exit is a CodeExitError, which the streaming protocol
// turns into the command's exit code, as containerd's.
func (r streamRuntime) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	code, err := r.s.cfg.Runtime.Exec(ctx, id, cmd, sessionIO(ctx, id, in, out, errw, tty, resize))
	if err != nil {
		return fmt.Errorf("failed to exec in container: %w", err)
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("error executing command %v, exit code %d", cmd, code), Code: code}
	}
	return nil
}

func (r streamRuntime) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return r.s.cfg.Runtime.Attach(ctx, id, sessionIO(ctx, id, in, out, errw, tty, resize))
}

// PortForward connects to the port on the pod's localhost from inside its
// network namespace (the host's for a host-network pod) and copies both
// ways until one side ends, as containerd's: the other is given a second
// to finish.
func (r streamRuntime) PortForward(ctx context.Context, sandbox string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if port <= 0 || port > math.MaxUint16 {
		return fmt.Errorf("invalid port %d", port)
	}
	p, err := r.s.sandbox(ctx, sandbox)
	if err != nil {
		return err
	}
	conn, err := r.s.cfg.Runtime.DialPod(ctx, p.uid, port)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace %q: %w", port, sandbox, err)
	}
	defer conn.Close()
	l := log.WithFields(log.Fields{"sandbox": sandbox, "port": port})
	errs := make(chan error, 2)
	copyThen := func(dst io.Writer, src io.Reader) {
		defer crash.Recover(l, func(string) { errs <- errors.New("port forwarding panicked") })
		_, err := io.Copy(dst, src)
		errs <- err
	}
	go copyThen(stream, conn)
	go copyThen(conn, stream)
	var first error
	select {
	case first = <-errs:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errs:
		if first == nil {
			first = err
		}
	case <-time.After(time.Second):
	case <-ctx.Done():
		first = ctx.Err()
	}
	return first
}

// sessionIO turns a streaming session's streams into the runtime's: the
// streams it was not given stay nil, and terminal sizes are forwarded
// until the session ends (the library closes its channel then too).
func sessionIO(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) runtime.ExecIO {
	eio := runtime.ExecIO{Stdin: in, TTY: tty}
	if out != nil {
		eio.Stdout = out
	}
	if errw != nil {
		eio.Stderr = errw
	}
	if !tty || resize == nil {
		return eio
	}
	sizes := make(chan runtime.TermSize)
	go func() {
		defer crash.Recover(log.WithField("container", id), nil)
		defer close(sizes)
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-resize:
				if !ok {
					return
				}
				if sz.Width < 1 || sz.Height < 1 {
					continue
				}
				select {
				case sizes <- runtime.TermSize{Width: sz.Width, Height: sz.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	eio.Resize = sizes
	return eio
}

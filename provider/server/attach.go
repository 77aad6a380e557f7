package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/runtime"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AttachToContainer serves `kubectl attach` and `kubectl run -it`: the
// session joins the container's own stdio.
func (s *server) AttachToContainer(ctx context.Context, namespace, podName, container string, attach api.AttachIO) error {
	id, eio, done, err := s.session(ctx, namespace, podName, container, attach)
	if err != nil {
		return err
	}
	defer done()
	return s.cfg.Runtime.Attach(ctx, id, eio)
}

// session finds the running container a streaming session (exec or attach)
// is for and wires the session's streams for the runtime.
func (s *server) session(ctx context.Context, namespace, podName, container string, attach api.AttachIO) (string, runtime.ExecIO, func(), error) {
	pod, st, err := s.containerRef(ctx, namespace, podName, container)
	if err != nil {
		return "", runtime.ExecIO{}, nil, err
	}
	if st.State.Running == nil {
		return "", runtime.ExecIO{}, nil, errdefs.InvalidInputf("container %s is not running", container)
	}
	eio, done := sessionIO(pod, container, attach)
	return containerIDOf(st), eio, done, nil
}

// sessionIO turns a streaming session (exec or attach) into the runtime's
// streams; done ends the resize forwarder.
func sessionIO(pod *v1.Pod, container string, attach api.AttachIO) (runtime.ExecIO, func()) {
	eio := runtime.ExecIO{TTY: attach.TTY()}
	if in := attach.Stdin(); in != nil {
		eio.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		eio.Stdout = out
	}
	if e := attach.Stderr(); e != nil {
		eio.Stderr = e
	}
	done := make(chan struct{})
	if !attach.TTY() {
		return eio, func() { close(done) }
	}
	// virtual-kubelet never closes its resize channel: the forwarder ends
	// with the session.
	sizes := make(chan runtime.TermSize)
	go func() {
		defer crash.Recover(lifecycle.PodLogger(pod).WithField("container", container), nil)
		for {
			select {
			case s, ok := <-attach.Resize():
				if !ok {
					return
				}
				select {
				case sizes <- runtime.TermSize{Width: s.Width, Height: s.Height}:
				case <-done:
					return
				}
			case <-done:
				return
			}
		}
	}()
	eio.Resize = sizes
	return eio, func() { close(done) }
}

// podUIDKey carries the pod UID of a uid-form URL to the session, which
// then uses that incarnation and no other.
type podUIDKey struct{}

// withStreamRoutes serves the kubelet's uid form of exec and attach
// (/attach/{namespace}/{pod}/{uid}/{container}), which virtual-kubelet's
// routes lack: a pod of that name with another UID is not found, as in the
// kubelet's GetAttach, and the session runs in the pod of that UID even if
// the name has been reused since. The protocol's tty flag is left as the
// client asked: the container's terminal is what its spec said whatever the
// flag, which only decides whether the client sends sizes and gets a stderr
// stream.
func (s *server) withStreamRoutes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if len(parts) != 5 || (parts[0] != "attach" && parts[0] != "exec") {
			next.ServeHTTP(w, r)
			return
		}
		uid := types.UID(parts[3])
		pod, err := s.cfg.Pods.GetPodByUID(r.Context(), uid)
		if err != nil || pod.Namespace != parts[1] || pod.Name != parts[2] {
			writeError(w, http.StatusNotFound, fmt.Sprintf("pod %s/%s with UID %s not found", parts[1], parts[2], parts[3]))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), podUIDKey{}, uid))
		r.URL.Path = "/" + strings.Join([]string{parts[0], parts[1], parts[2], parts[4]}, "/")
		r.URL.RawPath = ""
		next.ServeHTTP(w, r)
	})
}

package cri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecSync runs a command in a running container of a pod through the
// runtime's exec (the kubelet API's), with its output gathered, as
// `crictl exec` without -it and the node e2e suite's checks use it.
func (s *server) ExecSync(ctx context.Context, r *criapi.ExecSyncRequest) (*criapi.ExecSyncResponse, error) {
	if len(r.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no command given")
	}
	st, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: r.GetContainerId()})
	if err != nil {
		return nil, err
	}
	id := st.Status.Id
	if st.Status.State != criapi.ContainerState_CONTAINER_RUNNING {
		// containerd's words for an exec into a container not running.
		return nil, fmt.Errorf("failed to exec in container: container is in %s state", st.Status.State.String())
	}
	if t := r.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	code, err := s.cfg.Runtime.Exec(ctx, id, r.GetCmd(), runtime.ExecIO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The kubelet reads an exec probe's timeout from this code.
			return nil, status.Errorf(codes.DeadlineExceeded, "failed to exec in container: timeout %v exceeded", time.Duration(r.GetTimeout())*time.Second)
		}
		return nil, fmt.Errorf("failed to exec in container: %w", err)
	}
	return &criapi.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: int32(code)}, nil
}

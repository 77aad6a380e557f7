package cri

import (
	"context"
	"errors"
	"fmt"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog has a running container's log writer start a new
// file at its log path, as containerd's CRI does when the kubelet's log
// manager has renamed the live file: hostlet rotates its logs itself (the
// same reopen, under the writer's lock), so only a rotation from outside
// needs it; a container not running is refused in containerd's words.
func (s *server) ReopenContainerLog(ctx context.Context, r *criapi.ReopenContainerLogRequest) (*criapi.ReopenContainerLogResponse, error) {
	st, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: r.GetContainerId()})
	if err != nil {
		return nil, err
	}
	if st.Status.State != criapi.ContainerState_CONTAINER_RUNNING {
		return nil, errors.New("container is not running")
	}
	if err := s.cfg.Runtime.ReopenContainerLog(st.Status.Id); err != nil {
		return nil, fmt.Errorf("failed to reopen the log of container %q: %w", st.Status.Id, err)
	}
	return &criapi.ReopenContainerLogResponse{}, nil
}

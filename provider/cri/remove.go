package cri

import (
	"context"
	"fmt"
	"syscall"

	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveContainer removes a container as containerd's CRI does (crictl
// rm): one not found is no error; a running one is first stopped at once
// (SIGKILL, containerd's forcible stop; crictl itself refuses a running
// one unless --force); its log files stay, the kubelet's to clean up
// (crictl rm removes them unless --keep-logs). The pod's worker is told
// the exit before the container goes, so it keeps the container's last
// status and restarts it per the pod's restartPolicy as a new container,
// as the kubelet does when its container disappears.
func (s *server) RemoveContainer(ctx context.Context, r *criapi.RemoveContainerRequest) (*criapi.RemoveContainerResponse, error) {
	st, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: r.GetContainerId()})
	if status.Code(err) == codes.NotFound {
		return &criapi.RemoveContainerResponse{}, nil
	} else if err != nil {
		return nil, err
	}
	id := st.Status.Id
	l := log.WithField("container", id)
	switch st.Status.State {
	case criapi.ContainerState_CONTAINER_RUNNING, criapi.ContainerState_CONTAINER_UNKNOWN:
		l.Info("CRI RemoveContainer: forcibly stopping the running container first")
		if err := s.cfg.Runtime.StopContainer(ctx, id, syscall.SIGKILL, 0); err != nil {
			return nil, fmt.Errorf("failed to forcibly stop container %q: %w", id, err)
		}
	case criapi.ContainerState_CONTAINER_CREATED:
		// hostlet's containers are created and started in one go by the
		// pod's worker: a created one is being started, which containerd's
		// CRI refuses to remove too.
		return nil, fmt.Errorf("failed to set removing state for container %q: container is in starting state, can't be removed", id)
	}
	final, err := s.cfg.Runtime.FinalStatus(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	s.cfg.Pods.ContainerExited(final)
	l.Info("CRI RemoveContainer: removing the container")
	if err := s.cfg.Runtime.RemoveContainerKeepingLogs(ctx, id); err != nil {
		return nil, fmt.Errorf("failed to delete containerd container %q: %w", id, err)
	}
	return &criapi.RemoveContainerResponse{}, nil
}

package cri

import (
	"context"
	"fmt"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer acts as the container dying, as `crictl stop` on a kubelet
// node: its task gets SIGTERM, SIGKILL after the timeout (at once with
// none, as containerd's CRI), and the pod's worker sees the exit and
// restarts it per the pod's restartPolicy. Only hostlet's pods' containers
// are in the view; any other id is refused as not found.
func (s *server) StopContainer(ctx context.Context, r *criapi.StopContainerRequest) (*criapi.StopContainerResponse, error) {
	// ContainerStatus resolves a prefix and refuses what is not a pod's.
	st, err := s.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: r.GetContainerId()})
	if err != nil {
		return nil, err
	}
	id := st.Status.Id
	if st.Status.State != criapi.ContainerState_CONTAINER_RUNNING {
		// containerd's CRI: stopping a stopped container is a no-op.
		return &criapi.StopContainerResponse{}, nil
	}
	grace := time.Duration(r.GetTimeout()) * time.Second
	log.WithFields(log.Fields{"container": id, "grace": grace}).Info("CRI StopContainer: the container is stopped as if it died")
	if err := s.cfg.Runtime.StopContainer(ctx, id, syscall.SIGTERM, grace); err != nil {
		return nil, fmt.Errorf("failed to stop container %q: %w", id, err)
	}
	return &criapi.StopContainerResponse{}, nil
}

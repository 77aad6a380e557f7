package cri

import (
	"context"
	"errors"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GetContainerEvents streams the pods' containers' events as containerd's
// CRI sends them to evented PLEG: created, started, stopped (the
// container's own process exited) and deleted, each with its pod's
// sandbox status and all its containers' statuses as they are when the
// event is sent (evented PLEG makes the pod's status from those, and
// ignores an event without a sandbox). Driven by containerd's event
// stream, no polling; the stream ends when containerd's breaks, and the
// client resubscribes (evented PLEG relists then). hostlet's sandboxes are
// no containerd containers, so no sandbox events are sent: their state is
// in every event's sandbox status.
func (s *server) GetContainerEvents(_ *criapi.GetEventsRequest, stream grpc.ServerStreamingServer[criapi.ContainerEventResponse]) (err error) {
	l := log.WithField("stream", "CRI container events")
	// The socket's server recovers panics of unary calls only.
	defer crash.Recover(l, func(string) { err = errors.New("container event stream failed") })
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var sendErr error
	err = s.cfg.Runtime.WatchContainerEvents(ctx, func(e runtime.ContainerEvent) {
		if sendErr != nil {
			return
		}
		if sendErr = stream.Send(s.containerEvent(ctx, e)); sendErr != nil {
			cancel()
		}
	})
	if sendErr != nil {
		return sendErr
	}
	if err != nil {
		l.WithError(err).Warn("containerd's event stream broke; the CRI event stream ends with it")
	}
	return err
}

// containerEvent is the response for one event, the pod's statuses read
// now as containerd's CRI reads them when it sends one.
func (s *server) containerEvent(ctx context.Context, e runtime.ContainerEvent) *criapi.ContainerEventResponse {
	resp := &criapi.ContainerEventResponse{
		ContainerId:        e.ID,
		ContainerEventType: containerEventType(e.Type),
		CreatedAt:          time.Now().UnixNano(),
	}
	l := log.WithFields(log.Fields{"container": e.ID, "uid": e.PodUID})
	p, err := s.sandbox(ctx, sandboxID(e.PodUID))
	if err != nil {
		// As containerd's: sent without, evented PLEG skips it.
		l.WithError(err).Warn("no sandbox status for a container event")
		return resp
	}
	resp.PodSandboxStatus = sandboxStatus(p)
	cs, err := s.cfg.Runtime.ListContainers(ctx, e.PodUID)
	if err != nil {
		l.WithError(err).Error("no container statuses for a container event")
		return resp
	}
	for _, c := range cs {
		mounts, err := s.cfg.Runtime.ContainerMounts(ctx, c.ID)
		if err != nil {
			continue // removed meanwhile
		}
		resp.ContainersStatuses = append(resp.ContainersStatuses, containerStatus(p, c, mounts))
	}
	return resp
}

func containerEventType(t runtime.ContainerEventType) criapi.ContainerEventType {
	switch t {
	case runtime.ContainerStarted:
		return criapi.ContainerEventType_CONTAINER_STARTED_EVENT
	case runtime.ContainerStopped:
		return criapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	case runtime.ContainerDeleted:
		return criapi.ContainerEventType_CONTAINER_DELETED_EVENT
	}
	return criapi.ContainerEventType_CONTAINER_CREATED_EVENT
}

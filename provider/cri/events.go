package cri

import (
	"context"
	"errors"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GetContainerEvents streams the pods' containers' events as containerd's
// CRI sends them to evented PLEG: created, started, stopped (the
// container's own process exited) and deleted, each with its pod's
// sandbox status and all its containers' statuses as they are when the
// event is sent (evented PLEG makes the pod's status from those, and
// ignores an event without a sandbox). The sandboxes' too, under the
// sandbox's id: created and started once it is whole, stopped when it is
// released, deleted once the view no longer has it (its record and its
// containers gone: the pod was cleaned up), that one without a sandbox
// status, as containerd's is sent after the sandbox left its store.
// Driven by containerd's event stream and the runtime's sandbox events,
// no polling; the stream ends when containerd's breaks, and the client
// resubscribes (evented PLEG relists then).
func (s *server) GetContainerEvents(_ *criapi.GetEventsRequest, stream grpc.ServerStreamingServer[criapi.ContainerEventResponse]) (err error) {
	l := log.WithField("stream", "CRI container events")
	// The socket's server recovers panics of unary calls only.
	defer crash.Recover(l, func(string) { err = errors.New("container event stream failed") })
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var sendErr error
	// deleted are the pods whose sandbox's deletion was sent, until the
	// view has their sandbox again (a static pod's UID is its manifest's,
	// the same when the manifest comes back).
	deleted := map[string]bool{}
	send := func(resp *criapi.ContainerEventResponse) {
		if sendErr == nil {
			if sendErr = stream.Send(resp); sendErr != nil {
				cancel()
			}
		}
	}
	err = s.cfg.Runtime.WatchContainerEvents(ctx, func(e runtime.ContainerEvent) {
		resp, gone := s.containerEvent(ctx, e)
		send(resp)
		if !gone {
			delete(deleted, e.PodUID)
		} else if !deleted[e.PodUID] {
			deleted[e.PodUID] = true
			send(&criapi.ContainerEventResponse{ContainerId: sandboxID(e.PodUID),
				ContainerEventType: criapi.ContainerEventType_CONTAINER_DELETED_EVENT, CreatedAt: time.Now().UnixNano()})
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
// now as containerd's CRI reads them when it sends one; gone says the
// view no longer has the pod's sandbox. A sandbox just gone from the view
// (released with no containers left) still has a status while the node
// knows the pod: NOT_READY, as containerd's stopped sandbox until it is
// removed.
func (s *server) containerEvent(ctx context.Context, e runtime.ContainerEvent) (resp *criapi.ContainerEventResponse, gone bool) {
	resp = &criapi.ContainerEventResponse{
		ContainerId:        e.ID,
		ContainerEventType: containerEventType(e.Type),
		CreatedAt:          time.Now().UnixNano(),
	}
	if e.ID == "" {
		resp.ContainerId = sandboxID(e.PodUID)
	}
	l := log.WithFields(log.Fields{"container": resp.ContainerId, "uid": e.PodUID})
	pods, err := s.snapshot(ctx)
	if err != nil {
		l.WithError(err).Error("no sandbox status for a container event")
		return resp, false
	}
	p, ok := pods[e.PodUID]
	if !ok {
		gone = true
		pod, err := s.cfg.Pods.GetPodByUID(ctx, types.UID(e.PodUID))
		if err != nil || pod == nil {
			// As containerd's: sent without, evented PLEG skips it.
			return resp, gone
		}
		p = &podSandbox{uid: e.PodUID, ref: runtime.PodRef{UID: e.PodUID, Namespace: pod.Namespace, Name: pod.Name}, pod: pod}
		p.seen, _ = s.cfg.Pods.SeenAt(pod.UID)
	}
	resp.PodSandboxStatus = sandboxStatus(p)
	cs, err := s.cfg.Runtime.ListContainers(ctx, e.PodUID)
	if err != nil {
		l.WithError(err).Error("no container statuses for a container event")
		return resp, gone
	}
	for _, c := range cs {
		mounts, err := s.cfg.Runtime.ContainerMounts(ctx, c.ID)
		if err != nil {
			continue // removed meanwhile
		}
		resp.ContainersStatuses = append(resp.ContainersStatuses, containerStatus(p, c, mounts))
	}
	return resp, gone
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

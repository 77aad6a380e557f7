package runtime

import (
	"context"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"
	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
)

var (
	oomMu   sync.Mutex
	oomSeen = map[string]bool{}
)

func (r *Runtime) takeOOM(id string) bool {
	oomMu.Lock()
	defer oomMu.Unlock()
	seen := oomSeen[id]
	delete(oomSeen, id)
	return seen
}

// WatchExits calls onExit with the final status of every container whose
// process exits, as containerd reports it (no polling). After a broken event
// stream (containerd restarted) it reconciles the exits it may have missed.
// It returns when ctx ends. A panic in onExit costs that one exit; a panic
// in the stream itself a resubscription (which reconciles), never the agent.
func (r *Runtime) WatchExits(ctx context.Context, onExit func(ContainerStatus)) {
	guarded := func(st ContainerStatus) {
		defer crash.Recover(log.WithFields(log.Fields{"container": st.ID, "uid": st.PodUID}), nil)
		onExit(st)
	}
	for ctx.Err() == nil {
		func() {
			defer crash.Recover(log.WithField("stream", "containerd events"), nil)
			r.watchExits(ctx, guarded)
		}()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (r *Runtime) watchExits(ctx context.Context, onExit func(ContainerStatus)) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		// Subscribed first, listed after: an exit between the list and the
		// subscription would be in neither (the list reads each task in
		// turn, which takes long on a full node, and a restarted hostlet's
		// adopted containers exit meanwhile). Events wait in the stream
		// while the list runs; an exit in both is reported twice, which the
		// consumer ignores. Up once containerd answered the list: the
		// subscription itself says nothing until it breaks.
		events, errs := r.client.EventService().Subscribe(ctx,
			`namespace==`+r.ns+`,topic=="/tasks/exit"`,
			`namespace==`+r.ns+`,topic=="/tasks/oom"`)
		if err := r.reconcileExits(ctx, onExit); err != nil {
			r.eventStream(err)
		} else {
			r.eventStream(nil)
		}
	loop:
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				if ctx.Err() == nil {
					log.WithError(err).Warn("containerd event stream broken; resubscribing")
					r.eventStream(err)
				}
				break loop
			case env := <-events:
				backoff = 200 * time.Millisecond
				ev, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				switch e := ev.(type) {
				case *apievents.TaskOOM:
					oomMu.Lock()
					oomSeen[e.ContainerID] = true
					oomMu.Unlock()
				case *apievents.TaskExit:
					// Exits of exec'd processes share the topic; only the
					// container's own process ends the container.
					if e.ID != e.ContainerID {
						continue
					}
					// Each exit is recorded on its own: finalizing one (the
					// shim's cleanup) takes long enough under load that a
					// burst of exits handled in turn reached pods seconds
					// late.
					go func(id string) {
						defer crash.Recover(log.WithField("container", id), nil)
						r.finalize(ctx, id)
						if st, err := r.ContainerStatus(ctx, id); err == nil {
							onExit(st)
						}
					}(e.ContainerID)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > 7*time.Second {
			backoff = 7 * time.Second
		}
	}
}

// reconcileExits reports every exited container; the consumer ignores exits
// it already knows, so repeating one (or reporting it late) is harmless.
func (r *Runtime) reconcileExits(ctx context.Context, onExit func(ContainerStatus)) error {
	cs, err := r.ListContainers(ctx, "")
	if err != nil {
		return err
	}
	for _, c := range cs {
		if c.State != StateExited {
			continue
		}
		// Off the event loop, as for an exit event: the consumer may read
		// the container's log (FallbackToLogsOnError).
		go func(id string) {
			defer crash.Recover(log.WithField("container", id), nil)
			r.finalize(ctx, id)
			if st, err := r.ContainerStatus(ctx, id); err == nil {
				onExit(st)
			}
		}(c.ID)
	}
	return nil
}

// WatchImages calls onChange whenever an image of the namespace is
// created, updated or deleted (a pull, a tag, image GC), as containerd
// reports it, so that the node's status lists the images without waiting
// for its next round. It returns when ctx ends; a broken stream is
// resubscribed, and onChange called then too (a change may be missed).
func (r *Runtime) WatchImages(ctx context.Context, onChange func()) {
	for ctx.Err() == nil {
		func() {
			defer crash.Recover(log.WithField("stream", "containerd image events"), nil)
			events, errs := r.client.EventService().Subscribe(ctx,
				`namespace==`+r.ns+`,topic~="^/images/"`)
			for {
				select {
				case <-ctx.Done():
					return
				case err := <-errs:
					if ctx.Err() == nil {
						log.WithError(err).Debug("containerd image event stream broken; resubscribing")
					}
					return
				case <-events:
					onChange()
				}
			}
		}()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		onChange()
	}
}

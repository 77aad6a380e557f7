// Package podsync keeps the node's pods and the API in step, by UID: every
// change of a pod bound to the node is handed to the node's workers (Pods),
// and every status they compute is written back to the API, one write in
// flight per pod, the latest status winning. It is the node's side of the
// kubelet's config source and status manager, in place of virtual-kubelet's
// pod controller, which works by namespace/name.
package podsync

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/provider/staticpod"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Pods runs the node's pods (provider.Provider).
type Pods interface {
	// SyncPod hands a pod's newest API object to the node: a new pod is
	// admitted and started, a known one's worker takes the change (a
	// deletionTimestamp starts its termination).
	SyncPod(ctx context.Context, pod *v1.Pod) error
	// RemovePod stops a pod removed from the API; pod is its final object.
	RemovePod(ctx context.Context, pod *v1.Pod) error
}

// Config is what the controller reads and writes.
type Config struct {
	// Client writes statuses; its QPS and burst (--kube-api-qps and
	// --kube-api-burst) bound the writes.
	Client kubernetes.Interface
	// Informer is the node's pod informer (spec.nodeName is this node).
	Informer cache.SharedIndexInformer
	// InHand, if set, is told of each pod event handed to the node until
	// the node returns: the node's syncloop health check, which fails when
	// one hangs (the queue stalls behind it).
	InHand func() (done func())
}

// Controller dispatches pod events to the node's workers and writes their
// statuses.
type Controller struct {
	informer cache.SharedIndexInformer
	events   *events
	statuses *Statuses
	// registered is Run's handler on the informer.
	registered atomic.Pointer[cache.ResourceEventHandlerRegistration]
}

// New makes the controller; Run starts it.
func New(cfg Config) *Controller {
	return &Controller{
		informer: cfg.Informer,
		events:   newEvents(cfg.InHand),
		statuses: NewStatuses(cfg.Client, corelisters.NewPodLister(cfg.Informer.GetIndexer())),
	}
}

// HasSynced tells when Run has handed the node every pod the informer
// held when it started: from then on each removal from the API reaches
// RemovePod, and what is not in the informer's cache is gone for good. The
// orphan sweep waits for it, so that no pod removed between the informer's
// sync and Run's start escapes both.
func (c *Controller) HasSynced() bool {
	reg := c.registered.Load()
	return reg != nil && (*reg).HasSynced()
}

// Statuses is where the node's workers hand their statuses.
func (c *Controller) Statuses() *Statuses { return c.statuses }

// Run hands the pods to pods with workers goroutines for pod events and as
// many for status writes, until ctx ends.
func (c *Controller) Run(ctx context.Context, pods Pods, workers int) error {
	reg, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A mirror pod is the API's copy of a static pod, which the static
		// pod manager runs: it is never handed to the node, but its
		// status is the static pod's to write (a new mirror gets it at once).
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				if staticpod.IsMirror(pod) {
					c.statuses.observed(pod)
					return
				}
				c.events.changed(pod)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				if !staticpod.IsMirror(pod) {
					c.events.changed(pod)
				}
				c.statuses.observed(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok && !staticpod.IsMirror(pod) {
				c.events.removed(pod)
				c.statuses.Forget(pod.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	c.registered.Store(&reg)
	defer func() { _ = c.informer.RemoveEventHandler(reg) }()
	go func() {
		<-ctx.Done()
		c.events.queue.ShutDown()
		c.statuses.queue.ShutDown()
	}()
	for range workers {
		go c.events.run(ctx, pods)
		go c.statuses.run(ctx)
	}
	<-ctx.Done()
	return nil
}

// newQueue is a queue of pods by UID. Nothing is rate limited but
// failures, per pod: handing a pod to its worker writes nothing to the API,
// and the client's QPS bounds what is written.
func newQueue(name string) workqueue.TypedRateLimitingInterface[types.UID] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Millisecond, maxBackoff),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: name})
}

// maxBackoff bounds the retry delay of a pod whose handling keeps failing
// (the kubelet's status manager retries every 10 s).
const maxBackoff = 10 * time.Second

// process runs handle for the next pod of q until q shuts down: a failure
// retries the pod with its back-off, a success forgets it.
func process(q workqueue.TypedRateLimitingInterface[types.UID], what string, handle func(types.UID) error) {
	for {
		uid, quit := q.Get()
		if quit {
			return
		}
		if err := handleRecovered(uid, what, handle); err != nil {
			log.WithError(err).WithField("uid", uid).Warn(what + " failed; retrying")
			q.AddRateLimited(uid)
		} else {
			q.Forget(uid)
		}
		q.Done(uid)
	}
}

// handleRecovered is handle with a panic turned into its error: a bug in one
// pod's event or status costs that pod a retry, not the node.
func handleRecovered(uid types.UID, what string, handle func(types.UID) error) (err error) {
	defer func() {
		crash.Handle(recover(), log.WithField("uid", uid), func(msg string) {
			err = fmt.Errorf("panic while %s: %s", what, msg)
		})
	}()
	return handle(uid)
}

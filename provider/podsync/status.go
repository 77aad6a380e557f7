package podsync

import (
	"context"
	"sync"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/staticpod"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Statuses writes the statuses the node's workers compute, as the
// kubelet's status manager: per pod, the latest status wins and one write
// is in flight; a write the API already has is skipped; conditions owned
// by others (readiness gates, the scheduler's) are kept as the API has
// them. A status is written only on the pod of the same UID.
type Statuses struct {
	client kubernetes.Interface
	lister corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[types.UID]
	mu     sync.Mutex
	// pods are the statuses to keep written, by UID, until the pod is gone.
	pods map[types.UID]*podStatus
	// progress is closed (and replaced) whenever a pod's newest status
	// reaches the API or a pod is forgotten: WaitWritten's wake-up.
	progress chan struct{}
}

type podStatus struct {
	// want is the newest status the node computed (a copy of the pod with
	// it).
	want *v1.Pod
	// written is the API's answer to the last write until the informer
	// cache shows that version: till then the cache is older than the API.
	written *v1.Pod
	// set counts the statuses handed over; synced is set's value when the
	// newest status the API has (written, or found there) was taken.
	set, synced uint64
	// ended: a terminal status was handed over for this run of the pod.
	ended bool
}

// NewStatuses writes statuses with client; lister is the informer cache of
// the node's pods.
func NewStatuses(client kubernetes.Interface, lister corelisters.PodLister) *Statuses {
	return &Statuses{client: client, lister: lister, queue: newQueue("pod-statuses"), pods: map[types.UID]*podStatus{},
		progress: make(chan struct{})}
}

// Set takes a pod's newest status (the worker's copy of the pod with it)
// and queues its write.
func (s *Statuses) Set(pod *v1.Pod) {
	s.mu.Lock()
	ps := s.pods[pod.UID]
	if ps == nil {
		ps = &podStatus{}
		s.pods[pod.UID] = ps
	}
	ps.want = pod
	ps.set++
	ps.ended = ps.ended || lifecycle.Terminal(pod.Status.Phase)
	s.mu.Unlock()
	s.queue.Add(pod.UID)
}

// Forget drops what is known of a pod removed from the API.
func (s *Statuses) Forget(uid types.UID) {
	s.mu.Lock()
	delete(s.pods, uid)
	s.wake()
	s.mu.Unlock()
}

// WaitWritten returns once the newest status Set for the pod is in the API
// (or the pod is gone from it), or with ctx's error. The node's shutdown
// waits on it so that no pod is left Running in the API when the host goes
// down: the write is asynchronous, and a lock released before it lands
// lets systemd stop hostlet with the write still queued.
func (s *Statuses) WaitWritten(ctx context.Context, uid types.UID) error {
	for {
		s.mu.Lock()
		ps := s.pods[uid]
		if ps == nil || ps.synced >= ps.set {
			s.mu.Unlock()
			return nil
		}
		progress := s.progress
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-progress:
		}
	}
}

// wake tells WaitWritten's callers to look again; s.mu is held.
func (s *Statuses) wake() {
	close(s.progress)
	s.progress = make(chan struct{})
}

// observed takes a new version of a pod from the informer. The echo of the
// last write means the cache caught up; any other change may be someone
// else's write of the status (the node lifecycle controller marks pods not
// ready when the node was unreachable), which the node's status corrects,
// as the kubelet's status manager reconciles against the API.
func (s *Statuses) observed(pod *v1.Pod) {
	uid := pod.UID
	if staticpod.IsMirror(pod) {
		// A mirror pod shows its static pod's status.
		uid = staticpod.StaticUID(pod)
	}
	s.mu.Lock()
	ps := s.pods[uid]
	echo := false
	if ps != nil && ps.written != nil && ps.written.ResourceVersion == pod.ResourceVersion {
		ps.written, echo = nil, true
	}
	s.mu.Unlock()
	if ps != nil && !echo {
		s.queue.Add(uid)
	}
}

func (s *Statuses) run(ctx context.Context) {
	process(s.queue, "writing a pod status", func(uid types.UID) error { return s.sync(ctx, uid) })
}

// sync writes the pod's newest status unless the API has it already.
func (s *Statuses) sync(ctx context.Context, uid types.UID) error {
	s.mu.Lock()
	ps := s.pods[uid]
	if ps == nil {
		s.mu.Unlock()
		return nil
	}
	want, base, gen := ps.want, ps.written, ps.set
	// A static pod put back in its source runs again with the same UID
	// (Forget dropped the earlier run): its mirror's terminal phase is that
	// run's, which this one leaves, as the kubelet's status manager writes.
	revive := staticpod.IsStatic(want) && !ps.ended
	s.mu.Unlock()
	l := lifecycle.PodLogger(want)
	api, err := s.lister.Pods(want.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) || (err == nil && !staticpod.SamePod(api, uid)) {
		if staticpod.IsStatic(want) {
			// A static pod's status goes to its mirror pod, which may be
			// missing for now (API down, deleted by hand): the status is
			// kept and written once a mirror appears (observed). Nothing
			// waits for it meanwhile.
			l.Debug("static pod status not written: no mirror pod yet")
			s.settled(uid, gen)
			return nil
		}
		l.Debug("pod status not written: the pod is gone from the API")
		s.Forget(uid)
		return nil
	}
	if err != nil {
		return err
	}
	if base == nil || base.UID != api.UID {
		// (A static pod's mirror pod replaced since the last write.)
		base = api
	}
	var written *v1.Pod
	fresh := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if fresh {
			// The cached version was not the API's: read the API's.
			cur, err := s.client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !staticpod.SamePod(cur, uid) {
				return apierrors.NewNotFound(v1.Resource("pods"), want.Name)
			}
			base = cur
		}
		fresh = true
		st, ok := statusToWrite(&base.Status, &want.Status, revive)
		if !ok {
			return nil
		}
		out := base.DeepCopy()
		out.Status = st
		var err error
		written, err = s.client.CoreV1().Pods(want.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
		return err
	})
	if Gone(err) {
		if staticpod.IsStatic(want) {
			s.settled(uid, gen)
			return nil
		}
		l.WithError(err).Debug("pod status not written: the pod is gone from the API")
		s.Forget(uid)
		return nil
	}
	if err != nil {
		return err
	}
	if written != nil {
		l.WithField("phase", written.Status.Phase).Debug("pod status written")
	}
	s.mu.Lock()
	if ps := s.pods[uid]; ps != nil && written != nil {
		ps.written = written
	}
	s.mu.Unlock()
	s.settled(uid, gen)
	return nil
}

// settled records that the pod's statuses up to gen need no more writing,
// and wakes WaitWritten.
func (s *Statuses) settled(uid types.UID, gen uint64) {
	s.mu.Lock()
	if ps := s.pods[uid]; ps != nil && gen > ps.synced {
		ps.synced = gen
		s.wake()
	}
	s.mu.Unlock()
}

// statusToWrite is the status to write over api's for the node's newest
// status want, and false if there is nothing to write: the API has it, or
// the pod ended there and want has not (a terminal phase is never left,
// unless revive: an earlier run's).
func statusToWrite(api, want *v1.PodStatus, revive bool) (v1.PodStatus, bool) {
	if lifecycle.Terminal(api.Phase) && !lifecycle.Terminal(want.Phase) && !revive {
		return v1.PodStatus{}, false
	}
	st := normalize(mergeStatus(api, want))
	if equality.Semantic.DeepEqual(&st, api) {
		return v1.PodStatus{}, false
	}
	return st, true
}

// Gone tells an expected answer about a pod already removed from the API:
// NotFound, or Forbidden, which is what the Node authorizer answers a node
// for a pod no longer bound to it.
func Gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

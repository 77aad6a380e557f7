package provider

import (
	"context"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/podsync"
	"github.com/hostlet/hostlet/provider/staticpod"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reject fails a pod the node does not admit, without running anything:
// its status goes through the status manager as every other one. The
// event says the admit handler's message, the status the same behind
// "Pod was rejected: ", as the kubelet's rejectPod.
func (p *Provider) reject(pod *v1.Pod, reason, msg string) {
	p.events.Event(pod, "", v1.EventTypeWarning, reason, msg)
	failed := pod.DeepCopy()
	failed.Status.Phase, failed.Status.Reason, failed.Status.Message = v1.PodFailed, reason, "Pod was rejected: "+msg
	p.publish(failed)
}

// publish hands a pod's new status to be written, on the pod of the same
// UID only (podsync.Statuses): every status hostlet writes, the final one
// of a deleted pod included, goes this one way.
func (p *Provider) publish(pod *v1.Pod) {
	p.observeStart(pod.UID, pod.Status.Phase)
	if p.statuses != nil {
		p.statuses.Set(pod)
	}
}

// finalStatusWait bounds how long a deleted pod's removal waits for its
// final status to reach the API, so that with the API unreachable the host
// is still cleaned up; the status manager keeps retrying the write.
const finalStatusWait = 30 * time.Second

// terminated cleans a deleted pod off the host and removes its object with
// grace 0 once its final status is written and its volumes are torn down
// (as the kubelet does once everything stopped and was reclaimed).
func (p *Provider) terminated(pod *v1.Pod) {
	ctx := p.ctx
	l := lifecycle.PodLogger(pod)
	l.WithField("phase", pod.Status.Phase).Info("pod terminated")
	// The worker published the final status before calling here; the pod
	// is removed only once the API has it, so no one sees it vanish Running
	// (the kubelet's status manager deletes only what canBeDeleted).
	// A static pod is the node's own: the API has its mirror only, which
	// the static pod manager deletes, and its final status needs no wait.
	static := staticpod.IsStatic(pod)
	if p.statuses != nil && !static {
		wctx, cancel := context.WithTimeout(ctx, finalStatusWait)
		err := p.statuses.WaitWritten(wctx, pod.UID)
		cancel()
		if err != nil {
			l.WithError(err).Warn("final pod status not yet in the API; removing the pod anyway")
		}
	}
	p.mu.Lock()
	if e := p.pods[pod.UID]; e != nil {
		e.cancel()
		delete(p.pods, pod.UID)
	}
	if p.byName[key(pod.Namespace, pod.Name)] == pod.UID {
		delete(p.byName, key(pod.Namespace, pod.Name))
	}
	p.markGone(pod.UID)
	if static {
		// Put back in its source, it runs again with the same UID: its
		// containers' restart counts go on from this run's.
		p.ranBefore[pod.UID] = previousRun{status: *pod.Status.DeepCopy(), at: time.Now()}
	}
	p.mu.Unlock()
	// Its resources are free: a deferred resize may fit now.
	p.retryResizes()
	// The object stays (Terminating) until the pod's volumes are torn
	// down, as the kubelet's status manager deletes a pod only once
	// PodResourcesAreReclaimed: a volume that does not unmount is retried
	// with back-off and holds the pod in the API, where it is seen.
	if err := p.tearDown(ctx, pod.UID, pod.Namespace, pod.Name); err != nil {
		l.WithError(err).Warn("pod teardown interrupted; the next start's sweep finishes it")
		return
	}
	l.Info("pod cleaned up on the host")
	if !static {
		zero := int64(0)
		err := p.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
		})
		if err != nil && !podsync.Gone(err) && !apierrors.IsConflict(err) {
			l.WithError(err).Warn("deleting pod")
		}
	}
}

package provider

import (
	"context"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/podsync"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// reject fails a pod the node does not admit, without running anything.
func (p *Provider) reject(ctx context.Context, pod *v1.Pod, reason, msg string) {
	p.events.Event(pod, "", v1.EventTypeWarning, reason, msg)
	err := p.updateStatus(ctx, pod, func(st *v1.PodStatus) {
		st.Phase, st.Reason, st.Message = v1.PodFailed, reason, msg
	})
	if err != nil && !podsync.Gone(err) {
		lifecycle.PodLogger(pod).WithError(err).Warn("rejecting pod")
	}
}

// updateStatus changes the status of the pod's current object (the same
// UID only), retrying on conflicts.
func (p *Provider) updateStatus(ctx context.Context, pod *v1.Pod, change func(*v1.PodStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := p.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil
		}
		change(&cur.Status)
		_, err = p.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// publish hands a pod's new status to be written, on the pod of the same
// UID only (podsync.Statuses); the final status of a deleted pod is written
// by terminated.
func (p *Provider) publish(pod *v1.Pod) {
	p.observeStart(pod.UID, pod.Status.Phase)
	if p.statuses != nil {
		p.statuses.Set(pod)
	}
}

// terminated writes a deleted pod's terminal status, removes the object with
// grace 0 (as the kubelet does once everything stopped) and cleans the host.
func (p *Provider) terminated(pod *v1.Pod) {
	ctx := p.ctx
	l := lifecycle.PodLogger(pod)
	l.WithField("phase", pod.Status.Phase).Info("pod terminated")
	err := p.updateStatus(ctx, pod, func(cur *v1.PodStatus) {
		st := pod.Status.DeepCopy()
		st.Conditions = lifecycle.MergeConditions(ownedOnly(st.Conditions), cur.Conditions, metav1.Now())
		*cur = *st
	})
	if podsync.Gone(err) {
		l.WithError(err).Debug("terminal status not written: the pod is already gone")
	} else if err != nil {
		l.WithError(err).Warn("writing terminal pod status")
	}
	zero := int64(0)
	err = p.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !podsync.Gone(err) && !apierrors.IsConflict(err) {
		l.WithError(err).Warn("deleting pod")
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
	p.mu.Unlock()
	// Its resources are free: a deferred resize may fit now.
	p.retryResizes()
	p.cleanupHost(string(pod.UID), pod.Namespace, pod.Name)
	l.Info("pod cleaned up on the host")
}

func ownedOnly(cs []v1.PodCondition) []v1.PodCondition {
	var out []v1.PodCondition
	for _, c := range cs {
		if lifecycle.IsOwnedCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

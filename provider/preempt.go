package provider

import (
	"strings"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/node"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// preemptFor makes room for a critical pod (a static pod, or one of a
// system priority) the node rejected for lack of resources, as the
// kubelet's CriticalPodAdmissionHandler: the pods it may preempt are
// chosen, and if nothing but resources keeps it out once they are gone
// they are stopped (Failed, Preempting, DisruptionTarget) within their
// grace periods. true: admission is to be tried again.
func (p *Provider) preemptFor(pod *v1.Pod, rejected *lifecycle.Failure) bool {
	if !strings.HasPrefix(rejected.Reason, "OutOf") || !node.IsCriticalPod(pod) {
		return false
	}
	l := lifecycle.PodLogger(pod)
	p.mu.Lock()
	running := p.admittedPods()
	p.mu.Unlock()
	victims, err := p.node.PodsToPreempt(pod, running)
	if err != nil {
		l.WithError(err).Info("critical pod not admitted: no pods to preempt for it")
		return false
	}
	gone := map[types.UID]bool{}
	for _, v := range victims {
		gone[v.UID] = true
	}
	rest := make([]*v1.Pod, 0, len(running))
	for _, r := range running {
		if !gone[r.UID] {
			rest = append(rest, r)
		}
	}
	if reason, _, ok := p.node.Admit(pod, rest); !ok {
		// The kubelet preempts only when resources alone are short.
		l.WithField("reason", reason).Info("critical pod not admitted for more than resources; nothing preempted")
		return false
	}
	stopped := make([]<-chan struct{}, 0, len(victims))
	for _, v := range victims {
		lifecycle.PodLogger(v).WithFields(log.Fields{"for": pod.Namespace + "/" + pod.Name, "reason": rejected.Reason}).
			Info("preempting pod to free resources for a critical pod")
		p.events.Event(v, "", v1.EventTypeWarning, node.PreemptReason, node.PreemptMessage)
		grace := 30 * time.Second
		if g := v.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		stopping := p.StopPod(v.UID, lifecycle.StopRequest{
			Grace: grace, Reason: node.PreemptReason, Message: node.PreemptMessage,
			Conditions: []v1.PodCondition{{
				Type: v1.DisruptionTarget, Status: v1.ConditionTrue, ObservedGeneration: v.Generation,
				Reason: v1.PodReasonTerminationByKubelet, Message: node.PreemptConditionMessage,
			}},
		})
		// Released, as before, not just ended as the kubelet's killPodNow:
		// the victims' claims are unprepared and cgroups removed first.
		stopped = append(stopped, stopping.Released)
	}
	// As the kubelet's killPodNow, admission waits for them to stop.
	for _, s := range stopped {
		<-s
	}
	return true
}

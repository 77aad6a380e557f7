package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conditions evaluates the node conditions with the kubelet's reasons,
// keeping transition times of unchanged ones and recording the kubelet's
// node events on transitions. The kubelet sets no NetworkUnavailable
// condition (that is the cloud route controller's or the CNI's), so neither
// does hostlet: a broken CNI shows in Ready. The pressure conditions are
// the eviction manager's, from the observations of its last round.
func (n *Node) conditions(ctx context.Context, health error, prev []v1.NodeCondition) []v1.NodeCondition {
	// Whole seconds, as the API stores them, so times read back compare equal.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	var notReady []string
	if health != nil {
		notReady = append(notReady, "container runtime is down")
	}
	if netErr := n.NetworkErrors(); netErr != nil {
		notReady = append(notReady, netErr.Error())
	}
	if n.ShuttingDown() {
		notReady = append(notReady, "node is shutting down")
	}
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	switch len(notReady) {
	case 0:
	case 1:
		ready = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: notReady[0]}
	default: // the kubelet's aggregated error format
		ready = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "[" + strings.Join(notReady, ", ") + "]"}
	}

	n.mu.Lock()
	pressure := n.pressure
	n.mu.Unlock()
	cond := func(t v1.NodeConditionType, okReason, okMsg, badReason, badMsg string) v1.NodeCondition {
		if pressure != nil && pressure.UnderPressure(t) {
			return v1.NodeCondition{Type: t, Status: v1.ConditionTrue, Reason: badReason, Message: badMsg}
		}
		return v1.NodeCondition{Type: t, Status: v1.ConditionFalse, Reason: okReason, Message: okMsg}
	}
	out := []v1.NodeCondition{
		cond(v1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		cond(v1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"),
		cond(v1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
		ready,
	}
	old := map[v1.NodeConditionType]v1.NodeCondition{}
	for _, c := range prev {
		old[c.Type] = c
	}
	for i := range out {
		out[i].LastHeartbeatTime = now
		if o, ok := old[out[i].Type]; ok && o.Status == out[i].Status {
			out[i].LastTransitionTime = o.LastTransitionTime
			continue
		}
		out[i].LastTransitionTime = now
		n.recordTransition(out[i])
	}
	return out
}

// NetworkErrors is the kubelet's network state (runtimeState.networkErrors):
// why pods other than host-network ones cannot start, or nil.
func (n *Node) NetworkErrors() error {
	return networkNotReady(n.rt.Network().Status())
}

// networkNotReady words a CNI failure as the kubelet prints containerd's
// NetworkReady runtime condition.
func networkNotReady(cniErr error) error {
	if cniErr == nil {
		return nil
	}
	return fmt.Errorf("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: %v", cniErr)
}

// recordTransition records the kubelet's event for a condition's new status.
func (n *Node) recordTransition(c v1.NodeCondition) {
	if n.cfg.Events == nil {
		return
	}
	event := map[v1.NodeConditionType][2]string{
		v1.NodeMemoryPressure: {"NodeHasSufficientMemory", "NodeHasInsufficientMemory"},
		v1.NodeDiskPressure:   {"NodeHasNoDiskPressure", "NodeHasDiskPressure"},
		v1.NodePIDPressure:    {"NodeHasSufficientPID", "NodeHasInsufficientPID"},
		v1.NodeReady:          {"NodeNotReady", "NodeReady"},
	}[c.Type]
	reason := event[0]
	if c.Status == v1.ConditionTrue {
		reason = event[1]
	}
	n.cfg.Events.Eventf(n.Ref(), v1.EventTypeNormal, reason, "Node %s status is now: %s", n.cfg.Name, reason)
}

// pressureConditions lists the node's pressure conditions that are True,
// for admission.
func (n *Node) pressureConditions() []v1.NodeConditionType {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []v1.NodeConditionType
	for _, c := range n.node.Status.Conditions {
		if c.Type != v1.NodeReady && c.Status == v1.ConditionTrue {
			out = append(out, c.Type)
		}
	}
	return out
}

package node

import (
	"context"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	nodeutil "k8s.io/component-helpers/node/util"
)

// reactSpacing bounds how often a change of the Node by someone else is
// corrected at once; anything faster waits for the next status check.
const reactSpacing = time.Second

// desiredStatus is the Node status hostlet wants given the one the API has,
// built as the kubelet's status setters build theirs on the Node it got from
// the API: hostlet's conditions (transition time kept from the API while the
// status is the same), addresses, capacity and allocatable, node info and
// daemon endpoints, runtime handlers, images, features; what others own is kept (their
// conditions, extended resources advertised by hand, config).
func desiredStatus(api, want v1.NodeStatus, now metav1.Time) v1.NodeStatus {
	out := *api.DeepCopy()
	for _, c := range want.Conditions {
		c.LastHeartbeatTime = now
		i, _ := nodeutil.GetNodeCondition(&out, c.Type)
		if i < 0 {
			out.Conditions = append(out.Conditions, c)
			continue
		}
		if out.Conditions[i].Status == c.Status {
			c.LastTransitionTime = out.Conditions[i].LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		out.Conditions[i] = c
	}
	out.Addresses = append([]v1.NodeAddress(nil), want.Addresses...)
	if out.Capacity == nil {
		out.Capacity = v1.ResourceList{}
	}
	for k, v := range want.Capacity {
		out.Capacity[k] = v.DeepCopy()
	}
	// Allocatable follows capacity: hostlet's own figures for its
	// resources, the capacity itself for resources others advertise.
	out.Allocatable = v1.ResourceList{}
	for k, v := range out.Capacity {
		if a, ok := want.Allocatable[k]; ok {
			out.Allocatable[k] = a.DeepCopy()
		} else {
			out.Allocatable[k] = v.DeepCopy()
		}
	}
	out.NodeInfo = want.NodeInfo
	out.DaemonEndpoints = want.DaemonEndpoints
	out.RuntimeHandlers = want.RuntimeHandlers
	out.Images = want.Images
	if want.Features != nil {
		out.Features = want.Features.DeepCopy()
	}
	// The kubelet's volumesInUse, which the attach/detach controller reads.
	out.VolumesInUse = want.VolumesInUse
	return out
}

// statusDiff names the parts of two node statuses that differ, heartbeats
// aside.
func statusDiff(a, b v1.NodeStatus) []string {
	a, b = withoutHeartbeats(a), withoutHeartbeats(b)
	var out []string
	for _, f := range []struct {
		name string
		x, y any
	}{
		{"conditions", a.Conditions, b.Conditions},
		{"addresses", a.Addresses, b.Addresses},
		{"capacity", a.Capacity, b.Capacity},
		{"allocatable", a.Allocatable, b.Allocatable},
		{"nodeInfo", a.NodeInfo, b.NodeInfo},
		{"daemonEndpoints", a.DaemonEndpoints, b.DaemonEndpoints},
		{"images", a.Images, b.Images},
		{"runtimeHandlers", a.RuntimeHandlers, b.RuntimeHandlers},
		{"features", a.Features, b.Features},
		{"volumesInUse", a.VolumesInUse, b.VolumesInUse},
	} {
		if !equality.Semantic.DeepEqual(f.x, f.y) {
			out = append(out, f.name)
		}
	}
	if len(out) == 0 && !equality.Semantic.DeepEqual(a, b) {
		out = append(out, "other")
	}
	return out
}

// watchAPI makes every change of the Node in the API trigger a comparison,
// so that a change by someone else is put right at once.
func (n *Node) watchAPI(inf cache.SharedInformer) {
	kick := func() {
		select {
		case n.apiChanged <- struct{}{}:
		default:
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.podCIDRs(obj); kick() },
		UpdateFunc: func(_, obj any) { n.podCIDRs(obj); kick() },
	})
	if err != nil {
		log.WithError(err).Warn("node: watching the Node object")
	}
}

// podCIDRs hands the runtime the pod CIDRs the controller-manager allocated
// to the node, as the kubelet passes spec.podCIDRs to its runtime.
func (n *Node) podCIDRs(obj any) {
	if node, ok := obj.(*v1.Node); ok && node.Name == n.cfg.Name && len(node.Spec.PodCIDRs) > 0 {
		n.rt.Network().SetPodCIDRs(node.Spec.PodCIDRs)
	}
}

// reconcile compares the status hostlet reports with the Node as the API has
// it and, when they differ (the node lifecycle controller marked it Unknown
// during an outage, a user edited the status), writes hostlet's status over
// it, as the kubelet's status check does against the Node it reads.
func (n *Node) reconcile(ctx context.Context) {
	if n.cfg.Lister == nil || n.cfg.Client == nil {
		return
	}
	api, err := n.cfg.Lister.Get(n.cfg.Name)
	if err != nil {
		return // not registered yet, or the cache not synced
	}
	n.mu.Lock()
	want := n.node.Status.DeepCopy()
	n.mu.Unlock()
	desired := desiredStatus(api.Status, *want, metav1.NewTime(time.Now().Truncate(time.Second)))
	diff := statusDiff(api.Status, desired)
	if len(diff) > 0 {
		updated := api.DeepCopy()
		updated.Status = desired
		// The heartbeat client bounds the write, as the kubelet's does.
		if _, _, err := nodeutil.PatchNodeStatus(n.cfg.Client.CoreV1(), types.NodeName(n.cfg.Name), api, updated); err != nil {
			log.WithError(err).WithField("node", n.cfg.Name).Warn("node: correcting the status in the API")
			return
		}
		log.WithFields(log.Fields{"node": n.cfg.Name, "fields": strings.Join(diff, ",")}).
			Info("node: status in the API differed from the node's; corrected")
		for _, c := range desired.Conditions {
			// hostlet never reports Unknown: that came from the node
			// lifecycle controller or a user; the kubelet records the
			// condition's event when it puts it back.
			_, a := nodeutil.GetNodeCondition(&api.Status, c.Type)
			_, mine := nodeutil.GetNodeCondition(want, c.Type)
			if a != nil && a.Status == v1.ConditionUnknown && c.Status != v1.ConditionUnknown && mine != nil {
				n.recordTransition(c)
			}
		}
	}
	if n.adoptTransitions(&desired) {
		n.notifyCurrent()
	}
}

// adoptTransitions takes the transition times the API keeps for conditions
// whose status hostlet agrees with, so later writes carry the same ones. It
// reports whether anything changed.
func (n *Node) adoptTransitions(api *v1.NodeStatus) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	changed := false
	for i := range n.node.Status.Conditions {
		mine := &n.node.Status.Conditions[i]
		_, c := nodeutil.GetNodeCondition(api, mine.Type)
		if c == nil || c.Status != mine.Status || c.LastTransitionTime.Equal(&mine.LastTransitionTime) {
			continue
		}
		mine.LastTransitionTime = c.LastTransitionTime
		changed = true
	}
	return changed
}

// notifyCurrent hands virtual-kubelet's node controller the node as it is
// now.
func (n *Node) notifyCurrent() {
	n.mu.Lock()
	cb := n.notify
	cur := n.node.DeepCopy()
	n.mu.Unlock()
	if cb != nil {
		cb(cur)
	}
}

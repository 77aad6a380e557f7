package eviction

import (
	"fmt"
	"strings"

	"github.com/hostlet/hostlet/provider/node"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The kubelet's annotations on the Evicted event.
const (
	offendingContainersKey      = "offending_containers"
	offendingContainersUsageKey = "offending_containers_usage"
	starvedResourceKey          = "starved_resource"
)

// signalResource is the resource each signal reclaims.
var signalResource = map[string]v1.ResourceName{
	node.SignalMemoryAvailable:            v1.ResourceMemory,
	node.SignalAllocatableMemoryAvailable: v1.ResourceMemory,
	node.SignalNodeFsAvailable:            v1.ResourceEphemeralStorage,
	node.SignalImageFsAvailable:           v1.ResourceEphemeralStorage,
	node.SignalNodeFsInodesFree:           resourceInodes,
	node.SignalImageFsInodesFree:          resourceInodes,
	node.SignalPIDAvailable:               "pids",
}

// message is the kubelet's eviction message and event annotations: the
// starved resource, the threshold and what was available, for memory the
// pod's (pod-level request) and containers' use above their requests, for
// ephemeral-storage the containers' (writable layer and logs).
func message(res v1.ResourceName, pod *v1.Pod, stats map[*v1.Pod]usage, disk map[*v1.Pod]diskUsage, crossed []threshold, obs node.Observations) (string, map[string]string) {
	annotations := map[string]string{}
	msg := fmt.Sprintf("The node was low on resource: %v. ", res)
	for _, t := range crossed {
		o, ok := obs[t.Signal]
		if signalResource[t.Signal] != res || !ok {
			continue
		}
		avail := resource.NewQuantity(o.Available, resource.BinarySI)
		if res == resourceInodes || res == "pids" {
			avail = resource.NewQuantity(o.Available, resource.DecimalSI)
		}
		msg += fmt.Sprintf("Threshold quantity: %v, available: %v. ", t.Limit(o.Capacity), avail)
		break
	}
	u, ok := stats[pod]
	if !ok {
		return msg, annotations
	}
	if res == v1.ResourceMemory && pod.Spec.Resources != nil {
		if req, ok := pod.Spec.Resources.Requests[v1.ResourceMemory]; ok {
			total := resource.NewQuantity(u.total(), resource.BinarySI)
			msg += fmt.Sprintf("Pod %s was using %s, request is %s, has larger consumption of %v. ", pod.Name, total, req.String(), res)
			annotations["offending_pod"] = pod.Name
			annotations["offending_pod_usage"] = total.String()
		}
	}
	var names, used []string
	var text string
	switch res {
	case v1.ResourceMemory:
		names, used, text = offenders(pod, u)
	case v1.ResourceEphemeralStorage:
		names, used, text = diskOffenders(pod, disk[pod])
	}
	msg += text
	annotations[offendingContainersKey] = strings.Join(names, ",")
	annotations[offendingContainersUsageKey] = strings.Join(used, ",")
	annotations[starvedResourceKey] = string(res)
	return msg, annotations
}

// containerMessage is the kubelet's line for a container using more of res
// than it requests.
func containerMessage(name string, used *resource.Quantity, request resource.Quantity, res v1.ResourceName) string {
	return fmt.Sprintf("Container %s was using %s, request is %s, has larger consumption of %v. ", name, used, request.String(), res)
}

package nodecontainers

import (
	"github.com/hostlet/hostlet/provider/node"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// QOSCgroups writes the QoS cgroups' memory limits (*runtime.Cgroups).
type QOSCgroups interface {
	UpdateQOSMemory(burstable, bestEffort int64) error
}

// QOSReserve is the kubelet's QoS container manager's memory reserve
// (qosReserved with the QOSReserved gate): a share of the memory the
// Guaranteed and Burstable pods request is kept from the lower classes by
// limiting the burstable and besteffort QoS cgroups, set again at each
// pod's start and removal and every minute, as the kubelet's
// UpdateCgroups.
type QOSReserve struct {
	// Percent is qosReserved's memory percentage (0-100).
	Percent int64
	// Allocatable is the memory the pods may have: the capacity less
	// systemReserved and kubeReserved (the kubelet's
	// GetNodeAllocatableAbsolute, without the eviction threshold).
	Allocatable int64
	Cgroups     QOSCgroups
}

// Update sets the limits from the node's active pods.
func (q *QOSReserve) Update(pods []*v1.Pod) error {
	if q == nil {
		return nil
	}
	if q.Allocatable == 0 {
		// As the kubelet's: no allocatable known, no limits.
		log.Debug("Allocatable memory reported as 0, not setting QoS memory limits")
		return nil
	}
	burstable, bestEffort := QOSMemoryLimits(pods, q.Allocatable, q.Percent)
	log.WithFields(log.Fields{"burstable": burstable, "besteffort": bestEffort, "percentReserve": q.Percent}).Debug("QoS memory limits")
	return q.Cgroups.UpdateQOSMemory(burstable, bestEffort)
}

// QOSMemoryLimits is the kubelet's setMemoryReserve: the burstable QoS
// cgroup gets allocatable less percent of the Guaranteed pods' memory
// requests, the besteffort one that less percent of the Burstable pods'
// (each pod's request as the scheduler counts it: pod-level resources
// where set, init containers' peaks). Either may come out below zero or
// below the usage, as the kubelet's: the write then fails and is retried
// at the usage (runtime.Cgroups.UpdateQOSMemory).
func QOSMemoryLimits(pods []*v1.Pod, allocatable, percent int64) (burstable, bestEffort int64) {
	requests := map[v1.PodQOSClass]int64{}
	reuse := make(v1.ResourceList, 4)
	for _, pod := range pods {
		qos := node.QOSClass(pod)
		if qos == v1.PodQOSBestEffort {
			continue
		}
		if r, ok := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{Reuse: reuse})[v1.ResourceMemory]; ok {
			requests[qos] += r.Value()
		}
	}
	burstable = allocatable - requests[v1.PodQOSGuaranteed]*percent/100
	bestEffort = burstable - requests[v1.PodQOSBurstable]*percent/100
	return burstable, bestEffort
}

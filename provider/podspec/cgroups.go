package podspec

import (
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// podLevelResources: the PodLevelResources gate, on by default since 1.34.
const podLevelResources = true

// PodCgroupResources is the kubelet's ResourceConfigForPod
// (pkg/kubelet/cm/helpers_linux.go) with CFS quota enforced over the
// default period: CPU shares from the pod's requests; the quota only when
// every container (or the pod) limits CPU, the memory limit only when
// every one limits memory; BestEffort gets the minimum shares.
func PodCgroupResources(pod *v1.Pod) runtime.PodResources {
	opts := resourcehelper.PodResourcesOptions{SkipPodLevelResources: !podLevelResources}
	reqs := resourcehelper.PodRequests(pod, opts)
	cpuLimitsDeclared, memoryLimitsDeclared := true, true
	limitOpts := opts
	limitOpts.ContainerFn = func(res v1.ResourceList, _ resourcehelper.ContainerType) {
		if res.Cpu().IsZero() {
			cpuLimitsDeclared = false
		}
		if res.Memory().IsZero() {
			memoryLimitsDeclared = false
		}
	}
	limits := resourcehelper.PodLimits(pod, limitOpts)
	if podLevelResources && resourcehelper.IsPodLevelResourcesSet(pod) {
		if !pod.Spec.Resources.Limits.Cpu().IsZero() {
			cpuLimitsDeclared = true
		}
		if !pod.Spec.Resources.Limits.Memory().IsZero() {
			memoryLimitsDeclared = true
		}
	}
	var cpuRequests, cpuLimits, memoryLimits int64
	if q, ok := reqs[v1.ResourceCPU]; ok {
		cpuRequests = q.MilliValue()
	}
	if q, ok := limits[v1.ResourceCPU]; ok {
		cpuLimits = q.MilliValue()
	}
	if q, ok := limits[v1.ResourceMemory]; ok {
		memoryLimits = q.Value()
	}
	shares := runtime.MilliCPUToShares(cpuRequests)
	quota := runtime.MilliCPUToQuota(cpuLimits, runtime.QuotaPeriod)
	period := uint64(runtime.QuotaPeriod)
	var out runtime.PodResources
	switch node.QOSClass(pod) {
	case v1.PodQOSGuaranteed:
		out = runtime.PodResources{CPUShares: &shares, CPUQuota: &quota, CPUPeriod: &period, Memory: &memoryLimits}
	case v1.PodQOSBurstable:
		out.CPUShares = &shares
		if cpuLimitsDeclared {
			out.CPUQuota, out.CPUPeriod = &quota, &period
		}
		if memoryLimitsDeclared {
			out.Memory = &memoryLimits
		}
	default:
		minShares := uint64(runtime.MinShares)
		out.CPUShares = &minShares
	}
	return out
}

// ensurePodCgroup makes the pod's cgroup before its sandbox, as the
// kubelet's syncPod does (refreshing the QoS cgroups' shares first for a
// new one), and returns the parent of its containers.
func (r *Runtime) ensurePodCgroup(pod *v1.Pod) (string, error) {
	r.updateQOSCgroups()
	return r.rt.EnsurePodCgroup(string(pod.UID), string(node.QOSClass(pod)), PodCgroupResources(pod))
}

// ResizePodCgroup applies the pod's current resources to its cgroup (the
// pod-level half of an in-place resize; containers are updated apart).
func (r *Runtime) ResizePodCgroup(pod *v1.Pod) error {
	return r.rt.UpdatePodCgroup(string(pod.UID), string(node.QOSClass(pod)), PodCgroupResources(pod))
}

// removePodCgroup removes a finished pod's cgroup and gives its share of
// the burstable QoS cgroup back.
func (r *Runtime) removePodCgroup(uid string, l *log.Entry) {
	if err := r.rt.RemovePodCgroup(uid); err != nil {
		l.WithError(err).Warn("removing the pod's cgroup")
	}
	r.updateQOSCgroups()
}

// updateQOSCgroups sets the burstable QoS cgroup's shares to its pods'
// CPU requests, as the kubelet's qosContainerManager.
func (r *Runtime) updateQOSCgroups() {
	if r.cfg.ActivePods == nil {
		return
	}
	pods, ok := r.cfg.ActivePods()
	if !ok {
		return
	}
	if err := r.rt.UpdateQOSCgroups(BurstableMilliCPU(pods)); err != nil {
		log.WithError(err).Warn("updating the QoS cgroups")
	}
}

// BurstableMilliCPU sums the CPU requests of the Burstable pods.
func BurstableMilliCPU(pods []*v1.Pod) int64 {
	var milli int64
	opts := resourcehelper.PodResourcesOptions{SkipPodLevelResources: !podLevelResources}
	for _, p := range pods {
		if node.QOSClass(p) != v1.PodQOSBurstable {
			continue
		}
		if q, ok := resourcehelper.PodRequests(p, opts)[v1.ResourceCPU]; ok {
			milli += q.MilliValue()
		}
	}
	return milli
}

package podspec

import (
	"context"
	"fmt"
	"math"

	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// podLevelResources: the PodLevelResources gate, on by default since 1.34.
const podLevelResources = true

// PodCgroupResources is the kubelet's ResourceConfigForPod
// (pkg/kubelet/cm/helpers_linux.go) with its CFS quota settings cfs: CPU
// shares from the pod's requests; the quota (unlimited when cfs is off)
// only when every container (or the pod) limits CPU, the memory limit only
// when every one limits memory; BestEffort gets the minimum shares.
func PodCgroupResources(pod *v1.Pod, cfs CFSQuota) runtime.PodResources {
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
	quota, period := cfs.pod(cpuLimits)
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
	res := PodCgroupResources(pod, r.cfg.CFSQuota)
	if limit := r.cfg.PodPidsLimit; limit > 0 {
		// The pod's processes together, as the kubelet's pod container
		// manager sets pids.max: a fork bomb stays in its pod.
		res.PidsLimit = &limit
	}
	return r.rt.EnsurePodCgroup(string(pod.UID), string(node.QOSClass(pod)), res)
}

// ResizePodCgroup is the pod-level half of an in-place resize, as the
// kubelet's doPodResizeAction: the pod's cgroup gets the memory limit, CPU
// quota and shares of its allocated resources, those that grow before its
// containers are updated (grow), those that shrink after, so a container
// is never capped by the old pod limit. A memory limit below what the pod
// uses now is refused, as the kubelet does. The burstable QoS cgroup's
// shares follow the pods' CPU requests.
func (r *Runtime) ResizePodCgroup(ctx context.Context, pod *v1.Pod, grow bool) error {
	uid, qos := string(pod.UID), string(node.QOSClass(pod))
	cur, ok, err := r.rt.PodCgroupState(uid, qos)
	if err != nil || !ok {
		return err
	}
	want := PodCgroupResources(pod, r.cfg.CFSQuota)
	// Checked before anything moves too, as the kubelet's
	// validatePodResizeAction, to leave no half-done resize.
	if shrink := resizeStep(want, cur, false); shrink.Memory != nil && cur.MemoryUsage >= uint64(*shrink.Memory) {
		return fmt.Errorf("cannot decrease memory limits: attempting to set pod memory limit (%d) below current usage (%d)", *shrink.Memory, cur.MemoryUsage)
	}
	set := resizeStep(want, cur, grow)
	if set.Memory != nil || set.CPUQuota != nil || set.CPUShares != nil {
		if err := r.rt.UpdatePodCgroup(uid, qos, set); err != nil {
			return err
		}
		log.WithFields(log.Fields{"pod": pod.Namespace + "/" + pod.Name, "grow": grow}).Info("pod cgroup resized")
	}
	if set.CPUShares != nil {
		r.updateQOSCgroups()
	}
	return nil
}

// resizeStep is what one step of a resize sets of want on a pod cgroup
// now at cur: the values above cur when growing, below when not (-1 in
// cur is unlimited). A limit is never removed in place, as with the
// kubelet.
func resizeStep(want runtime.PodResources, cur runtime.PodCgroupState, grow bool) runtime.PodResources {
	moves := func(to, from int64) bool {
		if from < 0 {
			from = math.MaxInt64
		}
		if grow {
			return to > from
		}
		return to < from
	}
	var set runtime.PodResources
	if want.Memory != nil && *want.Memory > 0 && moves(*want.Memory, cur.MemoryLimit) {
		set.Memory = want.Memory
	}
	if want.CPUQuota != nil && *want.CPUQuota > 0 && moves(*want.CPUQuota, cur.CPUQuota) {
		set.CPUQuota, set.CPUPeriod = want.CPUQuota, want.CPUPeriod
	}
	if want.CPUShares != nil && moves(int64(*want.CPUShares), int64(cur.CPUShares)) {
		set.CPUShares = want.CPUShares
	}
	return set
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

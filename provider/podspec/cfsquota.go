package podspec

import (
	"time"

	"github.com/hostlet/hostlet/runtime"
)

// CFSQuota is how CPU limits become CFS quotas: the kubelet's cpuCFSQuota
// and cpuCFSQuotaPeriod. The zero value is its defaults (limits enforced
// over the kernel's 100ms period).
type CFSQuota struct {
	// Off is cpuCFSQuota: false: CPU limits are not enforced. A
	// container's cgroup then gets no quota and no period from its spec,
	// a pod's an unlimited quota (-1), as the kubelet's.
	Off bool
	// Period is cpuCFSQuotaPeriod in microseconds (cpu.cfs_period_us,
	// cpu.max's second field); 0 is runtime.QuotaPeriod.
	Period uint64
}

// NewCFSQuota is the kubelet's settings as its runtime manager takes them:
// the period is the configured one only with the CustomCPUCFSQuotaPeriod
// gate (the kubelet's validation, which has run, refuses another one than
// 100ms without it and one outside 1ms to 1s with it).
func NewCFSQuota(enforce bool, period time.Duration, customPeriod bool) CFSQuota {
	q := CFSQuota{Off: !enforce}
	if customPeriod {
		q.Period = uint64(period / time.Microsecond)
	}
	return q
}

// period is the CFS period in microseconds.
func (q CFSQuota) period() uint64 {
	if q.Period == 0 {
		return runtime.QuotaPeriod
	}
	return q.Period
}

// container is a container's CPU quota and period for a CPU limit of
// milliCPU (0: none), as the kubelet's calculateLinuxResources: with the
// quota enforced, the period always and the quota for a limit; else
// neither.
func (q CFSQuota) container(milliCPU int64) (quota int64, period uint64) {
	if q.Off {
		return 0, 0
	}
	period = q.period()
	return runtime.MilliCPUToQuota(milliCPU, int64(period)), period
}

// pod is a pod cgroup's CPU quota and period for the pod's CPU limits of
// milliCPU, as the kubelet's ResourceConfigForPod: not enforced, the quota
// is unlimited (-1) over the same period.
func (q CFSQuota) pod(milliCPU int64) (quota int64, period uint64) {
	period = q.period()
	if q.Off {
		return -1, period
	}
	return runtime.MilliCPUToQuota(milliCPU, int64(period)), period
}

package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A cgroup's spec series, as cAdvisor's collectContainersInfo sends them:
// its creation time and limits, without timestamps (they are not
// samples); and container_last_seen, stamped with the scrape's time.
var (
	lastSeenDesc  = cadvisorDesc("container_last_seen", "Last time a container was seen by the exporter")
	startTimeDesc = cadvisorDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")
	cpuPeriodDesc = cadvisorDesc("container_spec_cpu_period", "CPU period of the container.")
	cpuQuotaDesc  = cadvisorDesc("container_spec_cpu_quota", "CPU quota of the container.")
	cpuSharesDesc = cadvisorDesc("container_spec_cpu_shares", "CPU share of the container.")
	memLimitDesc  = cadvisorDesc("container_spec_memory_limit_bytes", "Memory limit for the container.")
	swapLimitDesc = cadvisorDesc("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.")
	memResvDesc   = cadvisorDesc("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.")

	specDescs = []*prometheus.Desc{lastSeenDesc, startTimeDesc, cpuPeriodDesc, cpuQuotaDesc, cpuSharesDesc,
		memLimitDesc, swapLimitDesc, memResvDesc}
)

func cadvisorDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, cadvisorLabels, nil)
}

// collectSpec sends a cgroup's spec series. The start time is the
// cgroup's creation (a container's cgroup is made when its task is
// created, just before it starts), as cAdvisor's; the CPU quota only
// where there is one; the memory limits 0 where unlimited.
func collectSpec(ch chan<- prometheus.Metric, s *cgroupSeries, now time.Time) {
	l := s.labels()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ch <- prometheus.NewMetricWithTimestamp(now, prometheus.MustNewConstMetric(lastSeenDesc, prometheus.GaugeValue, float64(now.Unix()), l...))
	spec := s.stats.Spec
	if !s.stats.Created.IsZero() {
		gauge(startTimeDesc, float64(s.stats.Created.Unix()))
	}
	if spec.HasCPU {
		gauge(cpuPeriodDesc, float64(spec.Period))
		if spec.Quota != 0 {
			gauge(cpuQuotaDesc, float64(spec.Quota))
		}
		gauge(cpuSharesDesc, float64(spec.Shares))
	}
	if spec.HasMemory {
		gauge(memLimitDesc, specMemory(spec.MemoryLimit))
		gauge(swapLimitDesc, specMemory(spec.SwapLimit))
		gauge(memResvDesc, specMemory(spec.Reservation))
	}
}

// specMemory is cAdvisor's specMemoryValue: v1's "unlimited" is the
// largest page-aligned number and v2's "max" MaxUint64, both above 2^62,
// and reported as 0.
func specMemory(v uint64) float64 {
	if v > 1<<62 {
		return 0
	}
	return float64(v)
}

package server

import "github.com/prometheus/client_golang/prometheus"

// memoryMetrics are cAdvisor's MemoryUsageMetrics, in bytes. Two are left
// out where the kernel has no such figure, rather than served as zeros as
// cAdvisor does: container_memory_failcnt on cgroup v2 (no failcnt), and
// container_memory_kernel_usage on v2 before Linux 5.18 (hostlet reads v2's
// "kernel" of memory.stat where cAdvisor reports 0).
var memoryMetrics = []*cadvisorMetric{
	{
		name: "container_memory_cache", help: "Number of bytes of page cache memory.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.Cache)) },
	}, {
		name: "container_memory_rss", help: "Size of RSS in bytes.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.RSS)) },
	}, {
		name: "container_memory_kernel_usage", help: "Size of kernel memory allocated in bytes.",
		kind: prometheus.GaugeValue, has: func(s *cgroupSeries) bool { return s.stats.Memory.HasKernelUsage },
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.KernelUsage)) },
	}, {
		name: "container_memory_mapped_file", help: "Size of memory mapped files in bytes.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.MappedFile)) },
	}, {
		name: "container_memory_swap", help: "Container swap usage in bytes.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.Swap)) },
	}, {
		name: "container_memory_failcnt", help: "Number of memory usage hits limits",
		kind: prometheus.CounterValue, has: func(s *cgroupSeries) bool { return s.stats.Memory.HasFailcnt },
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.Failcnt)) },
	}, {
		name: "container_memory_usage_bytes", help: "Current memory usage in bytes, including all memory regardless of when it was accessed",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.Usage)) },
	}, {
		name: "container_memory_max_usage_bytes", help: "Maximum memory usage recorded in bytes",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.MaxUsage)) },
	}, {
		name: "container_memory_working_set_bytes", help: "Current working set in bytes.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.WorkingSet)) },
	}, {
		name: "container_memory_total_active_file_bytes", help: "Current total active file in bytes.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.ActiveFile)) },
	}, {
		name: "container_memory_total_inactive_file_bytes", help: "Current total inactive file in bytes.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Memory.InactiveFile)) },
	}, {
		// cAdvisor gives the cgroup's own and the hierarchy's the same
		// (memory.stat's pgfault counts both ways alike).
		name: "container_memory_failures_total", help: "Cumulative count of memory allocation failures.",
		kind: prometheus.CounterValue, extra: []string{"failure_type", "scope"},
		values: func(s *cgroupSeries) []metricValue {
			m := s.stats.Memory
			return []metricValue{
				{float64(m.PageFaults), []string{"pgfault", "container"}},
				{float64(m.MajorPageFaults), []string{"pgmajfault", "container"}},
				{float64(m.PageFaults), []string{"pgfault", "hierarchy"}},
				{float64(m.MajorPageFaults), []string{"pgmajfault", "hierarchy"}},
			}
		},
	},
}

// oomMetrics are cAdvisor's OOMMetrics. cAdvisor counts the kernel log's
// OOM kills per cgroup since it started; hostlet reads the kernel's own
// count of the cgroup (oom_kill of memory.oom_control or memory.events),
// which is there from the cgroup's creation on and needs no log watcher.
var oomMetrics = []*cadvisorMetric{{
	name: "container_oom_events_total", help: "Count of out of memory events observed for the container",
	kind:   prometheus.CounterValue,
	values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.OOMKills)) },
}}

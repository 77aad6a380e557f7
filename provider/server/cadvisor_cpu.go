package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// cpuMetrics are cAdvisor's CpuUsageMetrics. The kubelet leaves
// PerCpuUsageMetrics off, so container_cpu_usage_seconds_total has the one
// sample cpu="total" (none while the counter is 0, as cAdvisor). The CFS
// series exist for cgroups with a quota.
var cpuMetrics = []*cadvisorMetric{
	{
		name: "container_cpu_user_seconds_total", help: "Cumulative user cpu time consumed in seconds.",
		kind:   prometheus.CounterValue,
		values: func(s *cgroupSeries) []metricValue { return one(seconds(s.stats.CPU.User)) },
	}, {
		name: "container_cpu_system_seconds_total", help: "Cumulative system cpu time consumed in seconds.",
		kind:   prometheus.CounterValue,
		values: func(s *cgroupSeries) []metricValue { return one(seconds(s.stats.CPU.System)) },
	}, {
		name: "container_cpu_usage_seconds_total", help: "Cumulative cpu time consumed in seconds.",
		kind: prometheus.CounterValue, extra: []string{"cpu"},
		values: func(s *cgroupSeries) []metricValue {
			if s.stats.CPU.Total == 0 {
				return nil
			}
			return []metricValue{{value: seconds(s.stats.CPU.Total), labels: []string{"total"}}}
		},
	}, {
		name: "container_cpu_cfs_periods_total", help: "Number of elapsed enforcement period intervals.",
		kind: prometheus.CounterValue, has: hasQuota,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.CPU.Periods)) },
	}, {
		name: "container_cpu_cfs_throttled_periods_total", help: "Number of throttled period intervals.",
		kind: prometheus.CounterValue, has: hasQuota,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.CPU.ThrottledPeriods)) },
	}, {
		name: "container_cpu_cfs_throttled_seconds_total", help: "Total time duration the container has been throttled.",
		kind: prometheus.CounterValue, has: hasQuota,
		values: func(s *cgroupSeries) []metricValue { return one(seconds(s.stats.CPU.ThrottledTime)) },
	},
}

// The kubelet's cAdvisor also has CpuLoadMetrics on
// (container_cpu_load_average_10s, container_cpu_load_d_average_10s,
// container_tasks_state), but runs without the netlink load reader they
// come from, so it serves them as zeros; hostlet leaves them out rather
// than serve figures it did not measure.

func hasQuota(s *cgroupSeries) bool { return s.stats.Spec.Quota != 0 }

// seconds turns nanoseconds into seconds.
func seconds(ns uint64) float64 { return float64(ns) / float64(time.Second) }

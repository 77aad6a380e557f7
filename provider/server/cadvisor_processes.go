package server

import "github.com/prometheus/client_golang/prometheus"

// processMetrics are cAdvisor's ProcessMetrics: processes, their open
// files and sockets counted in the cgroup itself (its cgroup.procs, not
// its children's: a pod cgroup on v1 has none of its own), threads and
// their limit from the pids controller (hierarchical). cAdvisor's
// container_ulimits_soft reads the limits of a container's first process,
// whose PID containerd keeps; hostlet does not ask containerd for it at
// each scrape, so that family is left out.
var processMetrics = []*cadvisorMetric{
	{
		name: "container_processes", help: "Number of processes running inside the container.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Processes)) },
	}, {
		name: "container_file_descriptors", help: "Number of open file descriptors for the container.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.FDs)) },
	}, {
		name: "container_sockets", help: "Number of open sockets for the container.",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Sockets)) },
	}, {
		name: "container_threads_max", help: "Maximum number of threads allowed inside the container, infinity if value is zero",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.ThreadsMax)) },
	}, {
		name: "container_threads", help: "Number of threads running inside the container",
		kind:   prometheus.GaugeValue,
		values: func(s *cgroupSeries) []metricValue { return one(float64(s.stats.Threads)) },
	},
}

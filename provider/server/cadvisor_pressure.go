package server

import "github.com/prometheus/client_golang/prometheus"

// pressureMetrics are cAdvisor's PressureMetrics, which the kubelet turns
// on with its KubeletPSI gate (beta, on by default since 1.34): the
// cgroup's PSI totals in seconds. cgroup v1 keeps no PSI per cgroup, where
// cAdvisor serves zeros; hostlet has them only where the kernel does.
var pressureMetrics = []*cadvisorMetric{
	psiCounter("container_pressure_cpu_stalled_seconds_total",
		"Total time duration no tasks in the container could make progress due to CPU congestion.",
		func(s *cgroupSeries) uint64 { return s.stats.Pressure.CPUFull }),
	psiCounter("container_pressure_cpu_waiting_seconds_total",
		"Total time duration tasks in the container have waited due to CPU congestion.",
		func(s *cgroupSeries) uint64 { return s.stats.Pressure.CPUSome }),
	psiCounter("container_pressure_memory_stalled_seconds_total",
		"Total time duration no tasks in the container could make progress due to memory congestion.",
		func(s *cgroupSeries) uint64 { return s.stats.Pressure.MemoryFull }),
	psiCounter("container_pressure_memory_waiting_seconds_total",
		"Total time duration tasks in the container have waited due to memory congestion.",
		func(s *cgroupSeries) uint64 { return s.stats.Pressure.MemorySome }),
	psiCounter("container_pressure_io_stalled_seconds_total",
		"Total time duration no tasks in the container could make progress due to IO congestion.",
		func(s *cgroupSeries) uint64 { return s.stats.Pressure.IOFull }),
	psiCounter("container_pressure_io_waiting_seconds_total",
		"Total time duration tasks in the container have waited due to IO congestion.",
		func(s *cgroupSeries) uint64 { return s.stats.Pressure.IOSome }),
}

// psiCounter is a PSI total (microseconds) in seconds.
func psiCounter(name, help string, micros func(*cgroupSeries) uint64) *cadvisorMetric {
	return &cadvisorMetric{
		name: name, help: help, kind: prometheus.CounterValue,
		has:    func(s *cgroupSeries) bool { return s.stats.Pressure != nil },
		values: func(s *cgroupSeries) []metricValue { return one(float64(micros(s)) / 1e6) },
	}
}

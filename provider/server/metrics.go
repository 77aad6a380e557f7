package server

import (
	"context"
	"net/http"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's resource metrics (pkg/kubelet/metrics/collectors), the
// names metrics-server reads. scrape_error, hidden since 1.29, is left out
// for resource_scrape_error.
var (
	containerLabels = []string{"container", "pod", "namespace"}
	podLabels       = []string{"pod", "namespace"}

	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", containerLabels, nil)
	containerMemoryDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", containerLabels, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", containerLabels, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", podLabels, nil)
	podMemoryDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", podLabels, nil)
	scrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector answers /metrics/resource from the CPU-and-memory
// summary, read at each scrape, each sample stamped with its reading's time
// as the kubelet does.
type resourceCollector struct{ s *server }

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemoryDesc, containerCPUDesc, containerMemoryDesc,
		containerStartDesc, podCPUDesc, podMemoryDesc, scrapeErrorDesc} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := c.s.summary(ctx, false)
	if err != nil {
		log.WithError(err).Warn("resource metrics: no summary")
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 0)
	cpuAndMemory(ch, sum.Node.CPU, sum.Node.Memory, nodeCPUDesc, nodeMemoryDesc)
	for _, p := range sum.Pods {
		for _, cs := range p.Containers {
			labels := []string{cs.Name, p.PodRef.Name, p.PodRef.Namespace}
			cpuAndMemory(ch, cs.CPU, cs.Memory, containerCPUDesc, containerMemoryDesc, labels...)
			if !cs.StartTime.IsZero() {
				ch <- prometheus.NewMetricWithTimestamp(cs.StartTime.Time, prometheus.MustNewConstMetric(containerStartDesc,
					prometheus.GaugeValue, float64(cs.StartTime.UnixNano())/float64(time.Second), labels...))
			}
		}
		cpuAndMemory(ch, p.CPU, p.Memory, podCPUDesc, podMemoryDesc, p.PodRef.Name, p.PodRef.Namespace)
	}
}

// cpuAndMemory sends the CPU counter and the memory working set of one
// node, pod or container.
func cpuAndMemory(ch chan<- prometheus.Metric, cpu *statsv1alpha1.CPUStats, mem *statsv1alpha1.MemoryStats, cpuDesc, memDesc *prometheus.Desc, labels ...string) {
	if cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		ch <- prometheus.NewMetricWithTimestamp(cpu.Time.Time, prometheus.MustNewConstMetric(cpuDesc,
			prometheus.CounterValue, float64(*cpu.UsageCoreNanoSeconds)/float64(time.Second), labels...))
	}
	if mem != nil && mem.WorkingSetBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(mem.Time.Time, prometheus.MustNewConstMetric(memDesc,
			prometheus.GaugeValue, float64(*mem.WorkingSetBytes), labels...))
	}
}

// hostletCollector is hostlet's own state under the kubelet's metric names,
// counted from the pods the node runs at each scrape.
type hostletCollector struct{ s *server }

var (
	runningPodsDesc = prometheus.NewDesc("kubelet_running_pods",
		"Number of pods that have a running pod sandbox", nil, nil)
	runningContainersDesc = prometheus.NewDesc("kubelet_running_containers",
		"Number of containers currently running", []string{"container_state"}, nil)
)

func (c hostletCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runningPodsDesc
	ch <- runningContainersDesc
}

func (c hostletCollector) Collect(ch chan<- prometheus.Metric) {
	pods, err := c.s.cfg.Pods.GetPods(context.Background())
	if err != nil {
		return
	}
	running := 0
	states := map[string]int{"running": 0, "exited": 0, "created": 0}
	for _, p := range pods {
		if podFinished(p) {
			continue
		}
		started := false
		for _, st := range allStatuses(p) {
			if st.ContainerID == "" {
				continue
			}
			started = true
			switch {
			case st.State.Running != nil:
				states["running"]++
			case st.State.Terminated != nil:
				states["exited"]++
			default:
				states["created"]++
			}
		}
		if started {
			running++
		}
	}
	ch <- prometheus.MustNewConstMetric(runningPodsDesc, prometheus.GaugeValue, float64(running))
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(runningContainersDesc, prometheus.GaugeValue, float64(n), state)
	}
}

func podFinished(p *v1.Pod) bool {
	return lifecycle.Terminal(p.Status.Phase)
}

// metricsHandlers are /metrics/resource and /metrics: each its own
// registry, as the kubelet's.
func (s *server) metricsHandlers() (resource, own http.Handler) {
	res := prometheus.NewRegistry()
	res.MustRegister(resourceCollector{s})
	reg := prometheus.NewRegistry()
	reg.MustRegister(hostletCollector{s}, volumeStatsCollector{s}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range s.cfg.Metrics {
		reg.MustRegister(c)
	}
	return promhttp.HandlerFor(res, promhttp.HandlerOpts{}), promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// probeMetricsHandler is /metrics/probes, a registry of its own as the
// kubelet's.
func (s *server) probeMetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	for _, c := range s.cfg.ProbeMetrics {
		reg.MustRegister(c)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

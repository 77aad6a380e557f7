package probes

import "github.com/prometheus/client_golang/prometheus"

// ProbeTotal is the kubelet's prober_probe_total, served on the kubelet
// API's /metrics/probes: every probe run by type and result, per container.
var ProbeTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Subsystem: "prober",
	Name:      "probe_total",
	Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"})

// MetricLabels name the container a worker probes in ProbeTotal; a worker
// without them (Pod empty) counts nothing.
type MetricLabels struct {
	Namespace, Pod, PodUID, Container string
}

// The kubelet's result label values: a warning is a success.
func resultLabel(r Result) string {
	if r == Failure {
		return "failed"
	}
	return "successful"
}

// count records one run.
func (m MetricLabels) count(kind Kind, r Result) {
	if m.Pod == "" {
		return
	}
	ProbeTotal.WithLabelValues(string(kind), resultLabel(r), m.Container, m.Pod, m.Namespace, m.PodUID).Inc()
}

// forget drops the worker's series when it stops, as the kubelet's worker
// does, so deleted pods do not stay in /metrics/probes.
func (m MetricLabels) forget(kind Kind) {
	if m.Pod == "" {
		return
	}
	for _, r := range []Result{Success, Failure} {
		ProbeTotal.DeleteLabelValues(string(kind), resultLabel(r), m.Container, m.Pod, m.Namespace, m.PodUID)
	}
}

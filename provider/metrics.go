package provider

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podStartDuration is the kubelet's histogram of the same name and buckets.
var podStartDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name: "kubelet_pod_start_duration_seconds",
	Help: "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
	Buckets: []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800,
		2700, 3600},
})

// Metrics are the provider's Prometheus collectors, for the kubelet API's
// /metrics.
func (p *Provider) Metrics() []prometheus.Collector {
	return []prometheus.Collector{podStartDuration}
}

// observeStart records a pod's start duration the first time a status of
// it says Running. A pod Running already when admitted (hostlet restarted)
// was started by an earlier run and is not counted.
func (p *Provider) observeStart(uid types.UID, phase v1.PodPhase) {
	if phase != v1.PodRunning {
		return
	}
	p.mu.Lock()
	e := p.pods[uid]
	if e == nil || e.running {
		p.mu.Unlock()
		return
	}
	e.running = true
	seen := e.seen
	p.mu.Unlock()
	podStartDuration.Observe(time.Since(seen).Seconds())
}

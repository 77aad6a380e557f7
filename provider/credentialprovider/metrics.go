package credentialprovider

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The kubelet's credential provider metrics (ALPHA), with its names.
var (
	pluginErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubelet_credential_provider_plugin_errors_total",
		Help: "Number of errors from credential provider plugin",
	}, []string{"plugin_name"})
	pluginDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubelet_credential_provider_plugin_duration",
		Help:    "Duration of execution in seconds for credential provider plugin",
		Buckets: prometheus.DefBuckets,
	}, []string{"plugin_name"})
)

// Metrics are the plugins' collectors for the kubelet API's /metrics: runs
// and errors per plugin, and the configuration's hash.
func (ps *Providers) Metrics() []prometheus.Collector {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kubelet_credential_provider_config_info",
		Help:        "Information about the last applied credential provider configuration with hash as label",
		ConstLabels: prometheus.Labels{"hash": ps.configHash},
	})
	info.Set(1)
	return []prometheus.Collector{pluginErrors, pluginDuration, info}
}

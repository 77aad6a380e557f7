package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kubelet's volume stats metrics (pkg/kubelet/metrics/collectors
// volume_stats.go): one series per claim with a volume whose driver reports
// its usage, read at each scrape.
var (
	volumeStatsLabels       = []string{"namespace", "persistentvolumeclaim"}
	volumeCapacityBytesDesc = prometheus.NewDesc("kubelet_volume_stats_capacity_bytes",
		"Capacity in bytes of the volume", volumeStatsLabels, nil)
	volumeAvailableBytesDesc = prometheus.NewDesc("kubelet_volume_stats_available_bytes",
		"Number of available bytes in the volume", volumeStatsLabels, nil)
	volumeUsedBytesDesc = prometheus.NewDesc("kubelet_volume_stats_used_bytes",
		"Number of used bytes in the volume", volumeStatsLabels, nil)
	volumeInodesDesc = prometheus.NewDesc("kubelet_volume_stats_inodes",
		"Maximum number of inodes in the volume", volumeStatsLabels, nil)
	volumeInodesFreeDesc = prometheus.NewDesc("kubelet_volume_stats_inodes_free",
		"Number of free inodes in the volume", volumeStatsLabels, nil)
	volumeInodesUsedDesc = prometheus.NewDesc("kubelet_volume_stats_inodes_used",
		"Number of used inodes in the volume", volumeStatsLabels, nil)
)

type volumeStatsCollector struct{ s *server }

func (c volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{volumeCapacityBytesDesc, volumeAvailableBytesDesc, volumeUsedBytesDesc,
		volumeInodesDesc, volumeInodesFreeDesc, volumeInodesUsedDesc} {
		ch <- d
	}
}

func (c volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.cfg.CSI == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := c.s.cfg.Pods.GetPods(ctx)
	if err != nil {
		log.WithError(err).Warn("volume stats metrics: no pods")
		return
	}
	// A claim two pods use is one series, as the kubelet dedups them.
	seen := map[[2]string]bool{}
	now := metav1.Now()
	for _, pod := range pods {
		for i := range pod.Spec.Volumes {
			vs, ok := c.s.csiVolumeStats(ctx, pod, &pod.Spec.Volumes[i], now)
			if !ok || vs.PVCRef == nil {
				continue
			}
			key := [2]string{vs.PVCRef.Namespace, vs.PVCRef.Name}
			if seen[key] {
				continue
			}
			seen[key] = true
			for _, m := range []struct {
				d *prometheus.Desc
				v *uint64
			}{
				{volumeCapacityBytesDesc, vs.CapacityBytes}, {volumeAvailableBytesDesc, vs.AvailableBytes},
				{volumeUsedBytesDesc, vs.UsedBytes}, {volumeInodesDesc, vs.Inodes},
				{volumeInodesFreeDesc, vs.InodesFree}, {volumeInodesUsedDesc, vs.InodesUsed},
			} {
				if m.v != nil {
					ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, float64(*m.v), key[0], key[1])
				}
			}
		}
	}
}

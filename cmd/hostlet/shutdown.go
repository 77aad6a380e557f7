package main

import (
	"time"

	"github.com/hostlet/hostlet/provider/node"
)

// shutdownConfig is graceful node shutdown as the flags and the
// configuration file say it: shutdownGracePeriodByPodPriority (file only,
// as the kubelet's) with its gate, else the two periods.
func (o *options) shutdownConfig() node.ShutdownConfig {
	cfg := node.ShutdownConfig{GracePeriod: o.shutdownGrace, CriticalGracePeriod: o.shutdownCritical}
	if o.kubeletConfig == nil || o.gates == nil || !o.gates.Enabled("GracefulNodeShutdownBasedOnPodPriority") {
		return cfg
	}
	for _, b := range o.kubeletConfig.ShutdownGracePeriodByPodPriority {
		cfg.ByPodPriority = append(cfg.ByPodPriority, node.ShutdownPriority{
			Priority: b.Priority, GracePeriod: time.Duration(b.ShutdownGracePeriodSeconds) * time.Second,
		})
	}
	return cfg
}

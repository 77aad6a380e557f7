package server

import (
	"strings"

	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

// networkMetrics are cAdvisor's NetworkUsageMetrics, one sample per
// interface. cAdvisor reads them from the network namespace of a
// container's process where the container has its own (a pod's pause
// container, the root's host namespace); hostlet's pods have no pause
// process, so a pod's interfaces are on its pod cgroup's series (see
// cadvisor.go) and the host's on the root's (/proc/net/dev: hostlet
// runs in the host's network namespace).
var networkMetrics = []*cadvisorMetric{
	netCounter("container_network_receive_bytes_total", "Cumulative count of bytes received",
		func(i runtime.InterfaceStats) uint64 { return i.RxBytes }),
	netCounter("container_network_receive_packets_total", "Cumulative count of packets received",
		func(i runtime.InterfaceStats) uint64 { return i.RxPackets }),
	netCounter("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving",
		func(i runtime.InterfaceStats) uint64 { return i.RxDropped }),
	netCounter("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving",
		func(i runtime.InterfaceStats) uint64 { return i.RxErrors }),
	netCounter("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted",
		func(i runtime.InterfaceStats) uint64 { return i.TxBytes }),
	netCounter("container_network_transmit_packets_total", "Cumulative count of packets transmitted",
		func(i runtime.InterfaceStats) uint64 { return i.TxPackets }),
	netCounter("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting",
		func(i runtime.InterfaceStats) uint64 { return i.TxDropped }),
	netCounter("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting",
		func(i runtime.InterfaceStats) uint64 { return i.TxErrors }),
}

func netCounter(name, help string, field func(runtime.InterfaceStats) uint64) *cadvisorMetric {
	return &cadvisorMetric{
		name: name, help: help, kind: prometheus.CounterValue, extra: []string{"interface"},
		values: func(s *cgroupSeries) []metricValue {
			var out []metricValue
			for _, i := range s.network {
				if !ignoredInterface(i.Name) {
					out = append(out, metricValue{float64(field(i)), []string{i.Name}})
				}
			}
			return out
		},
	}
}

// ignoredInterface is cAdvisor's isIgnoredDevice: loopback and the host
// ends of containers' links are not a container's traffic.
func ignoredInterface(name string) bool {
	name = strings.ToLower(name)
	for _, p := range []string{"lo", "veth", "docker", "nerdctl"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

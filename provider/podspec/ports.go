package podspec

import (
	"fmt"
	"strings"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	netutils "k8s.io/utils/net"
)

// portMappings are the pod's hostPorts as the sandbox's network serves them:
// the kubelet's per-container list (MakePortMappings: a port named, or
// keyed by family, protocol, host IP and ports, once per container), of
// which containerd's CRI hands CNI those with a host port. A host-network
// pod has none: its ports are the host's own.
func portMappings(pod *v1.Pod) []runtime.PortMapping {
	if pod.Spec.HostNetwork {
		return nil
	}
	var out []runtime.PortMapping
	for _, c := range pod.Spec.Containers {
		seen := map[string]bool{}
		for _, p := range c.Ports {
			family := "any"
			if p.HostIP != "" {
				family = "v4"
				if netutils.IsIPv6String(p.HostIP) {
					family = "v6"
				}
			}
			name := p.Name
			if name == "" {
				name = fmt.Sprintf("%s-%s-%s:%d:%d", family, p.Protocol, p.HostIP, p.ContainerPort, p.HostPort)
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			if p.HostPort <= 0 {
				continue
			}
			proto := p.Protocol
			if proto != v1.ProtocolUDP && proto != v1.ProtocolSCTP {
				proto = v1.ProtocolTCP // the kubelet's toRuntimeProtocol
			}
			out = append(out, runtime.PortMapping{
				HostPort: p.HostPort, ContainerPort: p.ContainerPort,
				Protocol: strings.ToLower(string(proto)), HostIP: p.HostIP,
			})
		}
	}
	return out
}

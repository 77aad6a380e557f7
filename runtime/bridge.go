package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
)

// defaultNetworkName names the default network (and host-local's allocation
// directory under dataDir).
const defaultNetworkName = "hostlet-pod-network"

// portmapPlugin is the chained plugin that serves the pods' hostPorts (the
// portMappings capability), as in containerd's default config.
var portmapPlugin = map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}}

// BridgeConfList is the default pod network over the node's pod CIDRs: a
// bridge with host-local addresses, one range per CIDR (dual-stack with one
// of each family), as containerd's CNI conf template renders it when the
// kubelet hands it the node's podCIDRs, portmap included for hostPorts. The
// bridge is the pods' gateway; ipMasq stays off: how pod traffic leaves the
// cluster (NAT or routes) is the cluster's choice. portmap writes iptables
// rules only for pods with hostPorts. Its bridge and host-local plugins run
// in-process (netinproc.go), keyed on these exact bytes.
func BridgeConfList(bridge string, podCIDRs []string, dataDir string) ([]byte, error) {
	if len(podCIDRs) == 0 || len(podCIDRs) > 2 {
		return nil, fmt.Errorf("want one or two pod CIDRs, got %v", podCIDRs)
	}
	var ranges [][]map[string]string
	var routes []map[string]string
	families := map[bool]bool{}
	for _, c := range podCIDRs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("pod CIDR %q: %w", c, err)
		}
		v4 := n.IP.To4() != nil
		if families[v4] {
			return nil, errors.New("two pod CIDRs must be of different IP families")
		}
		families[v4] = true
		ranges = append(ranges, []map[string]string{{"subnet": n.String()}})
		dst := "::/0"
		if v4 {
			dst = "0.0.0.0/0"
		}
		routes = append(routes, map[string]string{"dst": dst})
	}
	return json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       defaultNetworkName,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  ranges,
				"routes":  routes,
				"dataDir": dataDir,
			},
		}, portmapPlugin},
	})
}

package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// dummyLink carries the kubelet's node IP: the kubelet refuses a loopback
// node IP, and nothing but the apiserver on this host ever addresses it.
// A dummy link where the kernel has the module; otherwise (as on these
// machines) an empty bridge, which serves the same purpose. Names are fixed
// (one run at a time, see lockRun) so a killed run's links are found again.
const (
	dummyLink     = "hlbench0"
	kubeletBridge = "hlbench1"
	hostletBridge = "hlbench2"
)

// hostPrefixes lists the host's IPv4 routes and interface networks (not the
// default route), so the addresses we add collide with nothing.
func hostPrefixes() ([]*net.IPNet, error) {
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route: %w", err)
	}
	var nets []*net.IPNet
	for _, line := range strings.Split(string(out), "\n") {
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		dst := fs[0]
		if dst == "local" || dst == "broadcast" || dst == "unicast" {
			if len(fs) < 2 {
				continue
			}
			dst = fs[1]
		}
		if dst == "default" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, n, err := net.ParseCIDR(dst); err == nil {
			nets = append(nets, n)
		}
	}
	return nets, nil
}

// freePrefix returns the first of candidates (CIDRs) overlapping no host
// prefix.
func freePrefix(candidates []string) (*net.IPNet, error) {
	used, err := hostPrefixes()
	if err != nil {
		return nil, err
	}
next:
	for _, c := range candidates {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return nil, err
		}
		for _, u := range used {
			if u.Contains(n.IP) || n.Contains(u.IP) {
				continue next
			}
		}
		return n, nil
	}
	return nil, fmt.Errorf("no free prefix among %d candidates", len(candidates))
}

// randomPrefixes lists /bits networks "a.b.X.0" in a random order.
func randomPrefixes(a, b, bits int) []string {
	var r [1]byte
	_, _ = rand.Read(r[:])
	var out []string
	for i := 0; i < 256; i++ {
		out = append(out, fmt.Sprintf("%d.%d.%d.0/%d", a, b, (int(r[0])+i)%256, bits))
	}
	return out
}

// addDummyLink creates dummyLink with a free 10.254.x.1/32 and returns the
// address.
func addDummyLink() (string, error) {
	n, err := freePrefix(randomPrefixes(10, 254, 24))
	if err != nil {
		return "", err
	}
	ip := n.IP.To4()
	ip[3] = 1
	if err := exec.Command("ip", "link", "add", dummyLink, "type", "dummy").Run(); err != nil {
		if out, err := exec.Command("ip", "link", "add", dummyLink, "type", "bridge").CombinedOutput(); err != nil {
			return "", fmt.Errorf("ip link add %s (dummy, then bridge): %v: %s", dummyLink, err, out)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", ip.String() + "/32", "dev", dummyLink},
		{"link", "set", dummyLink, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			_ = exec.Command("ip", "link", "delete", dummyLink).Run()
			return "", fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return ip.String(), nil
}

// deleteLink removes a link if it exists.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %v: %s", name, err, out)
	}
	return nil
}

// kubeletNetwork is the CNI config of the kubelet's pods: a bridge and /24
// of their own (outside the harness's 10.244.0.0/16), so neither node's
// host-local IPAM can hand out the other's addresses.
type kubeletNetwork struct {
	confDir, bridge, subnet string
}

func writeKubeletCNI(dir string) (*kubeletNetwork, error) {
	n, err := freePrefix(randomPrefixes(10, 245, 24))
	if err != nil {
		return nil, err
	}
	kn := &kubeletNetwork{confDir: filepath.Join(dir, "net.d"), bridge: kubeletBridge, subnet: n.String()}
	if err := os.MkdirAll(kn.confDir, 0o755); err != nil {
		return nil, err
	}
	conf, err := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "hostlet-bench-kubelet",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": kn.bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": kn.subnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(dir, "ipam"),
			},
		}},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	return kn, os.WriteFile(filepath.Join(kn.confDir, "10-bench.conflist"), conf, 0o644)
}

// hostletDefaultNetwork is the hostlet node's own default network (see
// -hostlet-network): an empty --cni-conf-dir, the bridge, and a /24 of its
// own as the node's pod CIDR, as the controller-manager would allocate it.
func hostletDefaultNetwork(dir string) (confDir, podCIDR string, err error) {
	n, err := freePrefix(randomPrefixes(10, 246, 24))
	if err != nil {
		return "", "", err
	}
	confDir = filepath.Join(dir, "hostlet-net.d")
	return confDir, n.String(), os.MkdirAll(confDir, 0o755)
}

// podAddrs is how many pods host-local can address at once in subnet: all
// of it but the network and broadcast addresses and the bridge's gateway.
func podAddrs(subnet string) (int, error) {
	_, n, err := net.ParseCIDR(subnet)
	if err != nil {
		return 0, err
	}
	ones, bits := n.Mask.Size()
	if bits-ones < 2 {
		return 0, nil
	}
	return 1<<(bits-ones) - 3, nil
}

// subnetFits says why pods pods cannot all have an address in subnet.
func subnetFits(subnet string, pods int) error {
	n, err := podAddrs(subnet)
	if err != nil {
		return err
	}
	if pods > n {
		return fmt.Errorf("pod subnet %s has %d addresses for pods, the density curve needs %d at once", subnet, n, pods)
	}
	return nil
}

package harness

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// CNI plugin binaries: Debian's containernetworking-plugins.
const cniBinDir = "/usr/lib/cni"

// podCIDRBase is carved into one /24 per cluster.
const podCIDRBase = "10.244"

// CNIConfDir holds the cluster's conflist (pass as hostlet --cni-conf-dir).
func (c *Cluster) CNIConfDir() string { return filepath.Join(c.dir, "cni", "net.d") }

// CNIBinDir is where the CNI plugins live.
func (c *Cluster) CNIBinDir() string { return cniBinDir }

// CNICacheDir is libcni's result cache (pass as hostlet --cni-cache-dir).
func (c *Cluster) CNICacheDir() string { return filepath.Join(c.dir, "cni", "cache") }

// BridgeName is this cluster's Linux bridge; it exists once the first pod
// has been attached.
func (c *Cluster) BridgeName() string { return c.inst.Bridge }

// PodSubnet is this cluster's pod /24 (e.g. 10.244.37.0/24).
func (c *Cluster) PodSubnet() string { return c.inst.Subnet }

// writeCNIConfig writes a bridge + host-local conflist. Loopback is the
// node's job. ipMasq stays off: pods only talk to loopback and each other,
// and we never touch the host's iptables. A node in its own network
// namespace (Options.NodeNetns) also gets portmap for hostPorts: its
// iptables rules stay in that namespace.
func (c *Cluster) writeCNIConfig() error {
	for _, d := range []string{c.CNIConfDir(), c.CNICacheDir(), filepath.Join(c.dir, "cni", "ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	plugins := []any{map[string]any{
		"type":        "bridge",
		"bridge":      c.inst.Bridge,
		"isGateway":   true,
		"ipMasq":      false,
		"hairpinMode": true,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": c.inst.Subnet}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": filepath.Join(c.dir, "cni", "ipam"),
		},
	}}
	if c.net != nil {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	}
	conf := map[string]any{"cniVersion": "1.0.0", "name": "hostlet", "plugins": plugins}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.CNIConfDir(), "10-hostlet.conflist"), b, 0o644)
}

// newBridgeName returns "hl" + 6 random hex digits (Linux allows 15 chars).
func newBridgeName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "hl" + hex.EncodeToString(b[:])
}

// pickSubnet chooses a /24 of <base>.0.0/16 that no host route or interface
// address overlaps and no live harness instance holds (taken). Called under
// the instance registry lock so concurrent Starts cannot pick the same one
// before either bridge exists.
func pickSubnet(base string, taken map[string]bool) (string, error) {
	used, err := hostNets()
	if err != nil {
		return "", err
	}
	var r [1]byte
	_, _ = rand.Read(r[:])
	for i := 0; i < 256; i++ {
		third := (int(r[0]) + i) % 256
		cidr := fmt.Sprintf("%s.%d.0/24", base, third)
		_, n, _ := net.ParseCIDR(cidr)
		if taken[cidr] || overlapsAny(n, used) {
			continue
		}
		return cidr, nil
	}
	return "", fmt.Errorf("no free /24 left in %s.0.0/16", base)
}

func overlapsAny(n *net.IPNet, nets []*net.IPNet) bool {
	for _, m := range nets {
		if n.Contains(m.IP) || m.Contains(n.IP) {
			return true
		}
	}
	return false
}

// hostNets lists IPv4 routes (/proc/net/route) and interface networks,
// skipping the default route, which overlaps everything.
func hostNets() ([]*net.IPNet, error) {
	var out []*net.IPNet
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(fs[1], 16, 32)
		mask, err2 := strconv.ParseUint(fs[7], 16, 32)
		if err1 != nil || err2 != nil || mask == 0 {
			continue
		}
		ip, m := make(net.IP, 4), make(net.IPMask, 4)
		binary.LittleEndian.PutUint32(ip, uint32(dst)) // /proc/net/route is host (little) endian
		binary.LittleEndian.PutUint32(m, uint32(mask))
		out = append(out, &net.IPNet{IP: ip, Mask: m})
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			out = append(out, &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask})
		}
	}
	return out, nil
}

// deleteLink removes a network interface if it exists (the CNI bridge
// plugin creates the bridge on first use and never deletes it).
func deleteLink(name string) error {
	if name == "" {
		return nil
	}
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // already gone
	}
	out, err := exec.Command("ip", "link", "delete", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip link delete %s: %v: %s", name, err, out)
	}
	return nil
}

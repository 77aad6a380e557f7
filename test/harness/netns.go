package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// nodeNetBase is carved into one /24 per cluster with Options.NodeNetns:
// .1 is the root namespace's end of the veth pair, .2 the node's.
const nodeNetBase = "10.243"

// nodeNet is the network namespace a cluster's node lives in
// (Options.NodeNetns): hostlet and its containerd (so host-network pods and
// the CNI bridge too) run there, linked to the root namespace by a veth
// pair, so the node has a real, non-loopback address that the API server's
// node proxy, NodePorts and kube-proxy's iptables (confined to the
// namespace) treat as a real node's.
type nodeNet struct {
	netns  string // name under /run/netns
	veth   string // root-side end; the node's end is eth0
	subnet string // the veth pair's /24
}

func (n *nodeNet) rootIP() string { return ipIn(n.subnet, 1) }
func (n *nodeNet) nodeIP() string { return ipIn(n.subnet, 2) }

// path is the netns file processes enter with setns (nsenter --net).
func (n *nodeNet) path() string { return filepath.Join("/run/netns", n.netns) }

func ipIn(cidr string, host byte) string {
	ip, _, _ := net.ParseCIDR(cidr)
	ip = ip.To4()
	return net.IPv4(ip[0], ip[1], ip[2], host).String()
}

// setup creates the namespace and the veth pair, addresses both ends,
// routes the node's pod subnet from the root namespace and everything from
// the node through the root end, and turns on forwarding in the node (pods
// behind its bridge reach the API server; the root reaches pods).
func (n *nodeNet) setup(podSubnet string) error {
	steps := [][]string{
		{"ip", "netns", "add", n.netns},
		{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"ip", "addr", "add", n.rootIP() + "/24", "dev", n.veth},
		{"ip", "link", "set", n.veth, "up"},
		{"ip", "-n", n.netns, "link", "set", "lo", "up"},
		{"ip", "-n", n.netns, "addr", "add", n.nodeIP() + "/24", "dev", "eth0"},
		{"ip", "-n", n.netns, "link", "set", "eth0", "up"},
		{"ip", "-n", n.netns, "route", "add", "default", "via", n.rootIP()},
		{"ip", "route", "add", podSubnet, "via", n.nodeIP(), "dev", n.veth},
		{"nsenter", "--net=" + n.path(), "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// command returns bin and args wrapped to run in the node's network
// namespace. nsenter enters only the network namespace and then execs bin
// (same pid, so process groups and Pdeathsig hold): unlike `ip netns exec`,
// which also unshares the mount namespace, containerd and hostlet keep the
// host's mounts (and each other's).
func (n *nodeNet) command(bin string, args ...string) (string, []string) {
	if n == nil {
		return bin, args
	}
	return "nsenter", append([]string{"--net=" + n.path(), "--", bin}, args...)
}

// removeNodeNet deletes the veth pair (its routes go with it) and the
// namespace, once no process is left in it. Missing ones are fine.
func removeNodeNet(netns, veth string) error {
	if err := deleteLink(veth); err != nil {
		return err
	}
	if netns == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join("/run/netns", netns)); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "delete", netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", netns, err, out)
	}
	return nil
}

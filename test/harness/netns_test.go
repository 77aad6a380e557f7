package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNodeNetAddresses(t *testing.T) {
	n := &nodeNet{netns: "hlnode-x", veth: "hlabcdef", subnet: "10.243.7.0/24"}
	if n.rootIP() != "10.243.7.1" || n.nodeIP() != "10.243.7.2" {
		t.Errorf("root %s node %s", n.rootIP(), n.nodeIP())
	}
	bin, args := n.command("/bin/containerd", "--config", "c.toml")
	if want := []string{"--net=/run/netns/hlnode-x", "--", "/bin/containerd", "--config", "c.toml"}; bin != "nsenter" || !reflect.DeepEqual(args, want) {
		t.Errorf("command: %s %q", bin, args)
	}
	var none *nodeNet
	if bin, args := none.command("/bin/x", "a"); bin != "/bin/x" || !reflect.DeepEqual(args, []string{"a"}) {
		t.Errorf("no netns: %s %q", bin, args)
	}
}

// A cluster with NodeNetns runs containerd in the node's namespace, serves
// the API on the veth's root end, and Stop removes the namespace, the veth
// pair and its route.
func TestNodeNetnsStop(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	netns, veth, subnet := c.inst.NodeNetns, c.inst.NodeVeth, c.inst.Subnet
	if !strings.HasPrefix(c.APIServerURL(), "https://"+c.APIServerIP()+":") || !strings.HasPrefix(c.NodeIP(), nodeNetBase+".") {
		t.Errorf("API server %s, node %s", c.APIServerURL(), c.NodeIP())
	}
	if _, err := net.InterfaceByName(veth); err != nil {
		t.Errorf("veth %s: %v", veth, err)
	}
	// containerd sees the namespace's interfaces, not the root's.
	pid := c.Pid("containerd")
	own, _ := os.Readlink("/proc/self/ns/net")
	if ctrd, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || ctrd == own {
		t.Errorf("containerd's netns %q (%v), the test's %q", ctrd, err, own)
	}
	if out, _ := exec.Command("ip", "route", "show", subnet).Output(); !strings.Contains(string(out), veth) {
		t.Errorf("no route to the pod subnet %s through %s: %q", subnet, veth, out)
	}
	c.Stop()
	if _, err := net.InterfaceByName(veth); err == nil {
		t.Errorf("veth %s survived Stop", veth)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", netns)); !os.IsNotExist(err) {
		t.Errorf("netns %s survived Stop (%v)", netns, err)
	}
	if out, _ := exec.Command("ip", "route", "show", subnet).Output(); len(out) > 0 {
		t.Errorf("route survived Stop: %q", out)
	}
}

package harness

import (
	"reflect"
	"testing"
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

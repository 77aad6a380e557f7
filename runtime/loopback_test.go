package runtime

import (
	"net"
	"os"
	"testing"

	"github.com/containerd/containerd/v2/pkg/netns"
	cnins "github.com/containernetworking/plugins/pkg/ns"
)

// A new network namespace's lo is down; loopbackUp brings it up there and
// nowhere else.
func TestLoopbackUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ns, err := netns.NewNetNS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Remove()
	loFlags := func() net.Flags {
		var f net.Flags
		if err := ns.Do(func(cnins.NetNS) error {
			lo, err := net.InterfaceByName("lo")
			if err == nil {
				f = lo.Flags
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if loFlags()&net.FlagUp != 0 {
		t.Fatal("lo of a new namespace is up")
	}
	if err := loopbackUp(ns.GetPath()); err != nil {
		t.Fatal(err)
	}
	if loFlags()&net.FlagUp == 0 {
		t.Error("lo is still down")
	}
}

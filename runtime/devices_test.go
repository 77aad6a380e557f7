package runtime

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A device given by a symlink (a block volume's link in the pod's
// directory) is the device it points to, as containerd's CRI resolves it,
// with the access asked for.
func TestDeviceBySymlink(t *testing.T) {
	link := filepath.Join(t.TempDir(), "pv-1")
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{}
	s := &oci.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
	for _, o := range r.deviceOpts(Devices{Nodes: []DeviceNode{{HostPath: link, ContainerPath: "/dev/xvda", Permissions: "r"}}}) {
		if err := o(context.Background(), nil, nil, s); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/xvda" || s.Linux.Devices[0].Major != 1 || s.Linux.Devices[0].Minor != 3 {
		t.Fatalf("devices %+v", s.Linux.Devices)
	}
	if cg := s.Linux.Resources.Devices; len(cg) != 1 || cg[0].Access != "r" || !cg[0].Allow {
		t.Errorf("cgroup devices %+v", cg)
	}
}

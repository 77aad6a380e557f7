package harness

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hostlet/hostlet/test/images"
)

// FlannelDirs are a node's host directories the flannel DaemonSet writes to,
// in place of /opt/cni/bin, /etc/cni/net.d, /run/flannel and /var/lib/cni
// (see test/e2e/testdata/flannel.yaml). On a Host they are the same paths
// with per-host directories bound over them (HostOptions.Binds), as a
// DaemonSet's hostPaths are the same on every node.
type FlannelDirs struct{ Bin, Conf, Run, Data string }

// NewFlannelDirs names the dirs under base (not created).
func NewFlannelDirs(base string) FlannelDirs {
	return FlannelDirs{Bin: filepath.Join(base, "bin"), Conf: filepath.Join(base, "net.d"),
		Run: filepath.Join(base, "run-flannel"), Data: filepath.Join(base, "cni")}
}

// HostletArgs point a node at the dirs: an empty config dir (the DaemonSet
// fills it) and the plugin dir after the harness's (bridge, host-local and
// portmap, which flannel's plugin delegates to, are there).
func (d FlannelDirs) HostletArgs() []string {
	return []string{"--cni-conf-dir", d.Conf, "--cni-bin-dir", d.Bin}
}

// BindsOver maps each of own's dirs to the same dir of d: a Host's binds
// that show its own dirs at the shared paths.
func (d FlannelDirs) BindsOver(own FlannelDirs) map[string]string {
	return map[string]string{own.Bin: d.Bin, own.Conf: d.Conf, own.Run: d.Run, own.Data: d.Data}
}

// DeployFlannel builds flannel (build.sh flannel) and its image, imports it
// with a.Import and deploys test/e2e/testdata/flannel.yaml (host-gw,
// --kube-subnet-mgr, a DaemonSet on the own-netns nodes) over the cluster's
// pod /24 cut in /subnetLen per node (Options.NodeCIDRMaskSize), with the
// dirs d, flanneld using the interface ifaceArg (--iface or --iface-regex)
// says. flanneld reaches the API server through the kubernetes Service:
// kube-proxy must be deployed too.
func (c *Cluster) DeployFlannel(ctx context.Context, a AddonImages, d FlannelDirs, subnetLen int, ifaceArg string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return c.DeployComponent(ctx, a, "flannel", images.BuildFlannel, filepath.Join(root, "test", "e2e", "testdata", "flannel.yaml"), map[string]string{
		"CLUSTER_CIDR": c.PodSubnet(), "SUBNET_LEN": fmt.Sprint(subnetLen), "NODE_LABEL": NodeNetnsLabel,
		"CNI_BIN_DIR": d.Bin, "CNI_CONF_DIR": d.Conf, "RUN_DIR": d.Run, "DATA_DIR": d.Data, "IFACE_ARG": ifaceArg,
	})
}

package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
)

// hostLinkBase is carved into one /24 per Host: the veth pair linking it to
// the cluster's node (.1 the node's end, .2 the host's).
const hostLinkBase = "10.242"

// Host is a second machine beside a cluster's node (Options.NodeNetns), on
// one machine: a network namespace whose only link is a veth pair to the
// node's namespace (the two share an L2 segment, as hosts on one LAN, so
// host-gw routes between them work; the node forwards its traffic to the
// API server), a mount namespace of its own where per-host directories are
// mounted over shared paths (a DaemonSet's hostPaths are the same on every
// node), and a containerd of its own. StartHostlet with
// HostletOptions.Host runs a hostlet on it.
type Host struct {
	c      *Cluster
	name   string
	dir    string // <cluster dir>/hosts/<name>
	netns  string // name under /run/netns
	nodeIf string // the link's end in the node's namespace
	subnet string // the link's /24
	ctrd   *containerd.Client
	proc   *process
}

// HostOptions say how to make a Host.
type HostOptions struct {
	// Binds mount directories (created if missing) over paths in the host's
	// mount namespace: key the directory, value the path it shows at
	// (which must exist).
	Binds map[string]string
}

// AddHost starts Host name of a cluster with Options.NodeNetns: its
// namespaces, link and containerd. Stop (or the cluster's Stop, which
// sweeps whatever names the cluster's dir) takes it down.
func (c *Cluster) AddHost(ctx context.Context, name string, opts HostOptions) (*Host, error) {
	if c.net == nil {
		return nil, fmt.Errorf("AddHost needs a cluster with Options.NodeNetns")
	}
	h := &Host{c: c, name: name, dir: filepath.Join(c.dir, "hosts", name),
		netns: c.net.netns + "-" + name, nodeIf: "to-" + name}
	if len(h.nodeIf) > 15 {
		return nil, fmt.Errorf("host name %q too long for an interface name", name)
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return nil, err
	}
	if err := h.setupNet(); err != nil {
		h.Stop()
		return nil, fmt.Errorf("host %s network: %w", name, err)
	}
	if err := h.setupMounts(opts.Binds); err != nil {
		h.Stop()
		return nil, fmt.Errorf("host %s mounts: %w", name, err)
	}
	if err := h.startContainerd(ctx); err != nil {
		h.Stop()
		return nil, fmt.Errorf("host %s containerd: %w", name, err)
	}
	c.logf("harness: host %s at %s (link %s to the node's %s)", name, h.IP(), h.subnet, h.nodeIf)
	return h, nil
}

// IP is the host's address (its node's InternalIP).
func (h *Host) IP() string { return ipIn(h.subnet, 2) }

// LinkSubnet is the /24 the host and the cluster's node share.
func (h *Host) LinkSubnet() string { return h.subnet }

// NetnsPath is the host's network namespace (for nsenter --net).
func (h *Host) NetnsPath() string { return filepath.Join("/run/netns", h.netns) }

func (h *Host) mntns() string { return filepath.Join(h.dir, "ns", "mnt") }

// setupNet creates the namespace and the link to the node's, picks the
// link's /24 and routes it from the root namespace through the node, all
// under the instance registry's lock so no cluster starting meanwhile picks
// the same /24 (the route makes it taken).
func (h *Host) setupNet() error {
	return withRegistryLock(func() error {
		subnet, err := pickSubnet(hostLinkBase, nil)
		if err != nil {
			return err
		}
		h.subnet = subnet
		node := h.c.net
		return run([][]string{
			{"ip", "netns", "add", h.netns},
			{"ip", "-n", node.netns, "link", "add", h.nodeIf, "type", "veth", "peer", "name", "eth0", "netns", h.netns},
			{"ip", "-n", node.netns, "addr", "add", ipIn(subnet, 1) + "/24", "dev", h.nodeIf},
			{"ip", "-n", node.netns, "link", "set", h.nodeIf, "up"},
			{"ip", "-n", h.netns, "link", "set", "lo", "up"},
			{"ip", "-n", h.netns, "addr", "add", h.IP() + "/24", "dev", "eth0"},
			{"ip", "-n", h.netns, "link", "set", "eth0", "up"},
			{"ip", "-n", h.netns, "route", "add", "default", "via", ipIn(subnet, 1)},
			{"ip", "route", "add", subnet, "via", node.nodeIP(), "dev", node.veth},
			{"nsenter", "--net=" + h.NetnsPath(), "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		})
	})
}

// setupMounts makes the host's mount namespace, kept in a file (a private
// mount of its own, as unshare wants), a slave of the root one (the host
// sees the cluster's dirs, its own mounts stay its own), with binds on top.
func (h *Host) setupMounts(binds map[string]string) error {
	nsdir := filepath.Dir(h.mntns())
	if err := os.MkdirAll(nsdir, 0o755); err != nil {
		return err
	}
	if err := run([][]string{{"mount", "--bind", nsdir, nsdir}, {"mount", "--make-private", nsdir}}); err != nil {
		return err
	}
	if err := os.WriteFile(h.mntns(), nil, 0o644); err != nil {
		return err
	}
	script := "set -e"
	var args []string
	for src, dst := range binds {
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		script += fmt.Sprintf(` ; mount --bind "$%d" "$%d"`, len(args)+1, len(args)+2)
		args = append(args, src, dst)
	}
	return run([][]string{append([]string{"unshare", "--mount=" + h.mntns(), "--propagation", "slave", "--", "sh", "-c", script, "sh"}, args...)})
}

// command returns bin and args wrapped to run in the host's namespaces.
func (h *Host) command(bin string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--net=" + h.NetnsPath(), "--mount=" + h.mntns(), "--", bin}, args...)
}

func (h *Host) containerdDir() string { return filepath.Join(h.dir, "containerd") }

// startContainerd starts the host's own private containerd in its
// namespaces and waits until it answers.
func (h *Host) startContainerd(ctx context.Context) error {
	cfg, err := WriteContainerdConfig(h.containerdDir(), nil)
	if err != nil {
		return err
	}
	bin, args := h.command(filepath.Join(h.c.binDir, "containerd"), "--config", cfg)
	env := append(os.Environ(), "PATH="+h.c.binDir+":"+os.Getenv("PATH"))
	if h.proc, err = startProcess("containerd-"+h.name, h.c.logPath("containerd-"+h.name), env, true, bin, args...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return h.proc.waitFor(ctx, "host "+h.name+" containerd", 50*time.Millisecond, func(ctx context.Context) error {
		cl, err := DialContainerd(ctx, ContainerdSocketIn(h.containerdDir()), ContainerdNamespace)
		if err == nil {
			h.ctrd = cl
		}
		return err
	})
}

// ImportImage imports an image archive into the host's containerd, as
// Cluster.ImportImage does into the node's.
func (h *Host) ImportImage(ctx context.Context, archivePath string) error {
	_, err := ImportArchive(ctx, h.ctrd, ContainerdNamespace, archivePath)
	return err
}

// hostletArgs point a hostlet at the host: its containerd, its address and
// a serving certificate for it. StartHostlet puts them before ExtraArgs.
func (h *Host) hostletArgs(nodeName string) ([]string, error) {
	cert, key, err := h.servingCert(nodeName)
	if err != nil {
		return nil, err
	}
	return []string{
		"--container-runtime-endpoint", "unix://" + ContainerdSocketIn(h.containerdDir()),
		"--node-ip", h.IP(), "--address", h.IP(), "--healthz-bind-address", h.IP(),
		"--tls-cert-file", cert, "--tls-private-key-file", key,
	}, nil
}

// servingCert issues node nodeName's kubelet serving certificate for the
// host's address.
func (h *Host) servingCert(nodeName string) (certFile, keyFile string, err error) {
	return h.c.pki.issueFiles("kubelet-"+h.name+"-"+nodeName, certSpec{
		cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}, server: true,
		ips: []net.IP{net.ParseIP(h.IP())}, dns: []string{nodeName},
	})
}

// Stop stops the hostlets on the host, removes its containers, stops its
// containerd and removes its mount namespace, link and network namespace.
// Safe to call more than once.
func (h *Host) Stop() {
	h.c.mu.Lock()
	var mine []*Hostlet
	for _, hl := range h.c.hostlets {
		if hl.opts.Host == h {
			mine = append(mine, hl)
		}
	}
	h.c.mu.Unlock()
	for _, hl := range mine {
		hl.Stop()
	}
	if h.ctrd != nil {
		RemoveAllContainers(context.Background(), h.ctrd, h.c.logf)
		h.ctrd.Close()
		h.ctrd = nil
	}
	h.proc.stop(10 * time.Second)
	// Shims left behind name the host's dir.
	killProcsUnder([]string{h.dir}, h.c.runc(), nil, h.c.logf)
	nsdir := filepath.Dir(h.mntns())
	for _, m := range []string{h.mntns(), nsdir} {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && !os.IsNotExist(err) {
			h.c.logf("harness: host %s: unmount %s: %v", h.name, m, err)
		}
	}
	if h.subnet != "" {
		_ = exec.Command("ip", "route", "del", h.subnet).Run()
	}
	if err := removeNodeNet(h.netns, ""); err != nil {
		h.c.logf("harness: host %s: %v", h.name, err)
	}
}

// removeHostNets deletes the network namespaces of the hosts of the cluster
// whose node namespace is nodeNetns (a crashed run's included); their links
// go with them.
func removeHostNets(nodeNetns string, logf func(string, ...any)) {
	if nodeNetns == "" {
		return
	}
	nss, _ := filepath.Glob(filepath.Join("/run/netns", nodeNetns+"-*"))
	for _, ns := range nss {
		if err := removeNodeNet(filepath.Base(ns), ""); err != nil {
			logf("harness: %v", err)
		}
	}
}

// run runs each command in turn, stopping at the first failure.
func run(steps [][]string) error {
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

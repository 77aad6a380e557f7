package harness

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/hostlet/hostlet/provider/join"
)

// StartJoinedHostlet runs hostlet as a host would after `hostlet join`:
// from the config file join wrote (a KubeletConfiguration: CA, serving
// certificate, runtime, DNS) and the flags of the flags file beside it (its
// identity, root dir, CNI; as the unit passes them), with only a free
// kubelet API port on the node's address (the cluster's NodeIP, or
// opts.Host's IP when it runs on that Host, joined there with
// Host.JoinArgs) and opts.ExtraArgs on top. Unlike StartHostlet, the
// harness mints nothing for it. Waits for the Node to be Ready unless
// opts.NoWaitReady.
func (c *Cluster) StartJoinedHostlet(ctx context.Context, opts HostletOptions, configFile string) (*Hostlet, error) {
	if opts.Binary == "" || opts.NodeName == "" {
		return nil, fmt.Errorf("StartJoinedHostlet: Binary and NodeName are required")
	}
	c.mu.Lock()
	if _, dup := c.hostlets[opts.NodeName]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("hostlet %s already started", opts.NodeName)
	}
	c.mu.Unlock()
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	flags, err := join.ReadFlagsFile(filepath.Join(filepath.Dir(configFile), filepath.Base(join.Layout{}.FlagsFile())))
	if err != nil {
		return nil, err
	}
	h := &Hostlet{c: c, opts: opts, port: ports[0], healthzPort: ports[1]}
	h.args = []string{"--config", configFile}
	names := make([]string, 0, len(flags))
	for name := range flags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		h.args = append(h.args, "--"+name+"="+flags[name])
	}
	// The log dirs and cgroup root as StartHostlet's, on the command line
	// (a config file may not hold a hidden flag).
	ip := c.NodeIP()
	if opts.Host != nil {
		ip = opts.Host.IP()
	}
	h.args = append(h.args, "--address", ip, "--port", fmt.Sprint(h.port),
		"--healthz-port", fmt.Sprint(h.healthzPort), "--healthz-bind-address", ip,
		"--pod-logs-dir", h.PodLogsDir(), "--container-logs-dir", h.ContainerLogsDir(),
		"--cgroup-root", h.CgroupRoot(),
		// The shared disk's image GC and eviction thresholds as
		// StartHostlet's: with the defaults a disk others filled has the
		// joined node reclaim the imported test images from the containerd
		// every node of the harness uses.
		"--image-gc-high-threshold", "100")
	if !hasFlag(opts.ExtraArgs, "--eviction-hard") {
		h.args = append(h.args, "--eviction-hard", EvictionHard)
	}
	h.args = append(h.args, hostNetnsArgs(c, opts)...)
	h.args = append(h.args, opts.ExtraArgs...)
	if err := h.start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.hostlets[opts.NodeName] = h
	c.mu.Unlock()
	if !opts.NoWaitReady {
		if err := h.waitReady(ctx, time.Time{}); err != nil {
			return h, err
		}
	}
	return h, nil
}

// AgingNodeClientCert is a client certificate and key (PEM) for
// system:node:<name> from the cluster CA, issued an hour ago and valid for
// ten more minutes: far past the 70-90% of its lifetime at which a
// certificate manager renews it.
func (c *Cluster) AgingNodeClientCert(name string) (certPEM, keyPEM []byte, err error) {
	return c.pki.issue(certSpec{
		cn: "system:node:" + name, orgs: []string{"system:nodes"}, client: true,
		validFor: time.Hour + 10*time.Minute,
	})
}

// AgingNodeServingCert is a serving certificate and key (PEM) for node
// name's kubelet API with these IPs, from the cluster CA, issued an hour
// ago and valid for ten more minutes: one a certificate manager renews at
// once.
func (c *Cluster) AgingNodeServingCert(name string, ips ...net.IP) (certPEM, keyPEM []byte, err error) {
	return c.pki.issue(certSpec{
		cn: "system:node:" + name, orgs: []string{"system:nodes"}, server: true, ips: ips,
		validFor: time.Hour + 10*time.Minute,
	})
}

// JoinArgs are the flags `hostlet join` needs on this cluster's node for
// node name, besides the server, token and hash: state in stateDir, pods'
// state in the node's root dir (Hostlet.RootDir), the cluster's containerd,
// CNI and registry config, and the node's IP (127.0.0.1 without
// Options.NodeNetns); no systemd. Run it with JoinCommand(nil, ...).
func (c *Cluster) JoinArgs(stateDir, name string) []string {
	return c.joinArgs(stateDir, name, c.ContainerdSocket(), c.NodeIP())
}

// JoinArgs are the flags `hostlet join` needs on the host for node name, as
// Cluster.JoinArgs's, with the host's own containerd and address. Run it
// with JoinCommand(h, ...) and the node with StartJoinedHostlet and
// HostletOptions.Host h.
func (h *Host) JoinArgs(stateDir, name string) []string {
	return h.c.joinArgs(stateDir, name, ContainerdSocketIn(h.containerdDir()), h.IP())
}

func (c *Cluster) joinArgs(stateDir, name, containerdSocket, ip string) []string {
	args := []string{
		"--node-name", name, "--state-dir", stateDir, "--skip-systemd",
		"--root-dir", filepath.Join(c.dir, "hostlet", name),
		"--container-runtime-endpoint", "unix://" + containerdSocket,
		"--cni-conf-dir", c.CNIConfDir(), "--cni-bin-dir", c.CNIBinDir(),
		"--hostlet-arg", "containerd-namespace=" + ContainerdNamespace,
		"--hostlet-arg", "registry-config-dir=" + c.ContainerdHostsDir(),
		"--hostlet-arg", "cni-cache-dir=" + c.CNICacheDir(),
		"--hostlet-arg", "node-ip=" + ip,
	}
	if c.net != nil {
		// As StartHostlet's nodes: the DaemonSets that edit the node's
		// network (kube-proxy, flannel) select it.
		args = append(args, "--hostlet-arg", "node-labels="+NodeNetnsLabel+"=true")
	}
	return args
}

// JoinCommand is `hostlet join` (bin with args) run as a host's admin runs
// it on the node's machine: in host's namespaces, or (host nil) the
// cluster's node's (its network namespace with Options.NodeNetns).
func (c *Cluster) JoinCommand(ctx context.Context, host *Host, bin string, args ...string) *exec.Cmd {
	name, argv := c.net.command(bin, args...)
	if host != nil {
		name, argv = host.command(bin, args...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Env = append(os.Environ(), "PATH="+c.binDir+":"+os.Getenv("PATH"))
	return cmd
}

// CACertHash is the --discovery-token-ca-cert-hash of a CA certificate
// file, as kubeadm (and the chart's NOTES) pin it.
func CACertHash(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("%s: no PEM", file)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", err
	}
	return join.CAHash(cert), nil
}

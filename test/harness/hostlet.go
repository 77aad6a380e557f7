package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNetnsLabel ("true") marks the nodes of a cluster with
// Options.NodeNetns: DaemonSets that edit the node's network (kube-proxy)
// select them, as they must not run where the node is the host itself.
const NodeNetnsLabel = "hostlet.local/own-netns"

// EvictionHard is the --eviction-hard of the harness's hostlet nodes, unless
// ExtraArgs give one (which then replaces it whole, as the kubelet's flag
// replaces its defaults). The machine's disk is shared: with the kubelet's
// defaults (imagefs.available<15%, nodefs.available<10%) a disk others filled
// turned the nodes DiskPressure, tainted them and had image reclaim remove
// the imported test images, which cannot be pulled again. 1% trips only on
// a disk nothing can run on anyway. Memory keeps the kubelet's default.
const EvictionHard = "memory.available<100Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%"

// HostletOptions says how to run one hostlet node.
type HostletOptions struct {
	// Binary is the hostlet executable (see BuildHostlet). Required.
	Binary string
	// NodeName is the node's name; default "hostlet-node".
	NodeName string
	// ExtraArgs are appended after the standard flags (later flags win).
	ExtraArgs []string
	// Env is added to the process environment.
	Env []string
	// NoWaitReady returns as soon as the process started, without waiting
	// for the Node to become Ready.
	NoWaitReady bool
	// Host, if set, runs hostlet on that host (Cluster.AddHost) instead of
	// the cluster's node.
	Host *Host
	// KubeletConfig, if set, is written to <root-dir>.kubelet/config.yaml
	// and given as --config: a KubeletConfiguration (or hostlet's older
	// flag-keyed YAML). The harness's own flags (above) win over it, as
	// command-line flags do.
	KubeletConfig string
	// KubeletConfigDropins, if set, are written to
	// <root-dir>.kubelet/config.d/<name> (names with their .conf) and the
	// directory given as --config-dir.
	KubeletConfigDropins map[string]string
}

// Hostlet is one running hostlet process registered as a node.
type Hostlet struct {
	c    *Cluster
	opts HostletOptions
	args []string
	port int
	// healthzPort is the --healthz-port, on the node's IP (the test
	// reaches it with Options.NodeNetns too): each hostlet its own.
	healthzPort int

	mu   sync.Mutex
	proc *process
}

// StartHostlet launches hostlet as node opts.NodeName with its own node
// identity, serving cert, root dir and port, pointed at the cluster's
// containerd and CNI config (in the node's network namespace with
// Options.NodeNetns), and (unless NoWaitReady) waits for the node to be
// Ready.
func (c *Cluster) StartHostlet(ctx context.Context, opts HostletOptions) (*Hostlet, error) {
	if opts.Binary == "" {
		return nil, fmt.Errorf("HostletOptions.Binary is required (see BuildHostlet)")
	}
	if opts.NodeName == "" {
		opts.NodeName = "hostlet-node"
	}
	name := opts.NodeName
	c.mu.Lock()
	if _, dup := c.hostlets[name]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("hostlet %s already started", name)
	}
	c.mu.Unlock()

	kubeconfig, err := c.NodeKubeconfig(name)
	if err != nil {
		return nil, err
	}
	cert, key, err := c.KubeletServingCert(name)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(c.dir, "hostlet", name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	h := &Hostlet{c: c, opts: opts, port: ports[0], healthzPort: ports[1]}
	h.args = []string{
		"--kubeconfig", kubeconfig,
		"--hostname-override", name,
		"--node-ip", c.NodeIP(),
		"--root-dir", root,
		"--pod-logs-dir", h.PodLogsDir(),
		"--container-logs-dir", h.ContainerLogsDir(),
		"--container-runtime-endpoint", "unix://" + c.ContainerdSocket(),
		"--containerd-namespace", ContainerdNamespace,
		// The CRI view under the node's own dir: tests never touch /run.
		"--cri-socket", h.CRISocket(),
		"--cni-conf-dir", c.CNIConfDir(),
		"--cni-bin-dir", c.CNIBinDir(),
		"--cni-cache-dir", c.CNICacheDir(),
		"--registry-config-dir", c.ContainerdHostsDir(),
		"--address", c.NodeIP(),
		"--port", fmt.Sprint(h.port),
		"--healthz-port", fmt.Sprint(h.healthzPort), "--healthz-bind-address", c.NodeIP(),
		"--tls-cert-file", cert,
		"--tls-private-key-file", key,
		"--client-ca-file", c.pki.CACert,
		"--v", "4",
		// The images are imported, not pullable: image GC (which a full
		// disk would start) would break the tests that use them after it.
		"--image-gc-high-threshold", "100",
		// Pods' cgroups below the cluster's own root, removed with it.
		"--cgroup-root", h.CgroupRoot(),
	}
	if !hasFlag(opts.ExtraArgs, "--eviction-hard") {
		h.args = append(h.args, "--eviction-hard", EvictionHard)
	}
	if !hasFlag(opts.ExtraArgs, "--cluster-domain") && opts.KubeletConfig == "" && len(opts.KubeletConfigDropins) == 0 {
		// As a real node's configuration has it (the kubelet's default is
		// none: pod FQDNs end in "svc.").
		h.args = append(h.args, "--cluster-domain", ClusterDomain)
	}
	if hostSwapOn() {
		// The tests are about pods, not the host's swap (--fail-swap-on is
		// the kubelet's default and would refuse to start).
		h.args = append(h.args, "--fail-swap-on=false")
	}
	h.args = append(h.args, hostNetnsArgs(c, opts)...)
	if c.net != nil {
		// Before ExtraArgs: a --node-labels there replaces this one.
		h.args = append(h.args, "--node-labels", NodeNetnsLabel+"=true")
	}
	if opts.Host != nil {
		hostArgs, err := opts.Host.hostletArgs(name)
		if err != nil {
			return nil, err
		}
		h.args = append(h.args, hostArgs...)
	}
	configArgs, err := h.writeKubeletConfig()
	if err != nil {
		return nil, err
	}
	h.args = append(h.args, configArgs...)
	h.args = append(h.args, opts.ExtraArgs...)
	// If the Node does not exist yet, any Ready status is this process's;
	// otherwise (a name reused in this cluster) wait for a fresh heartbeat.
	var since time.Time
	if _, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		since = time.Now()
	}
	if err := h.start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.hostlets[name] = h
	c.mu.Unlock()
	if !opts.NoWaitReady {
		if err := h.waitReady(ctx, since); err != nil {
			return h, err
		}
	}
	return h, nil
}

// writeKubeletConfig writes opts.KubeletConfig and its drop-ins beside the
// root dir and returns the flags that name them.
func (h *Hostlet) writeKubeletConfig() ([]string, error) {
	dir := h.RootDir() + ".kubelet"
	var args []string
	if h.opts.KubeletConfig != "" {
		p := filepath.Join(dir, "config.yaml")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(h.opts.KubeletConfig), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--config", p)
	}
	if len(h.opts.KubeletConfigDropins) > 0 {
		d := filepath.Join(dir, "config.d")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		for name, content := range h.opts.KubeletConfigDropins {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				return nil, err
			}
		}
		args = append(args, "--config-dir", d)
	}
	return args, nil
}

func (h *Hostlet) start() error {
	env := append(os.Environ(), "PATH="+h.c.binDir+":"+os.Getenv("PATH"))
	env = append(env, h.opts.Env...)
	bin, args := h.c.net.command(h.opts.Binary, h.args...)
	if h.opts.Host != nil {
		bin, args = h.opts.Host.command(h.opts.Binary, h.args...)
	}
	p, err := startProcess("hostlet-"+h.opts.NodeName, h.LogPath(), env, true, bin, args...)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.proc = p
	h.mu.Unlock()
	return nil
}

// waitReady waits until the Node is Ready *and* this hostlet process has
// reported since it started (node heartbeat or lease renewal after since):
// after a restart the Node still says Ready from the previous process.
// Polls, because a lease renewal alone produces no Node event to watch.
// Fails fast if hostlet exits.
func (h *Hostlet) waitReady(ctx context.Context, since time.Time) error {
	p := h.process()
	name := h.opts.NodeName
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return p.waitFor(ctx, "node "+name+" Ready", 200*time.Millisecond, func(ctx context.Context) error {
		n, err := h.c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var ready *v1.NodeCondition
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == v1.NodeReady {
				ready = &n.Status.Conditions[i]
			}
		}
		if ready == nil || ready.Status != v1.ConditionTrue {
			return fmt.Errorf("node %s not Ready: %v", name, n.Status.Conditions)
		}
		// Heartbeats have second precision: only one in a later second than
		// since is certainly from this process. Leases have microseconds.
		if ready.LastHeartbeatTime.Time.After(since.Truncate(time.Second)) {
			return nil
		}
		l, err := h.c.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime != nil && !l.Spec.RenewTime.Time.Before(since) {
			return nil
		}
		return fmt.Errorf("node %s: no heartbeat or lease renewal since %v", name, since)
	})
}

func (h *Hostlet) process() *process {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.proc
}

// NodeName is the node this hostlet registers.
func (h *Hostlet) NodeName() string { return h.opts.NodeName }

// LogPath is <dir>/logs/hostlet-<name>.log (all restarts append to it).
func (h *Hostlet) LogPath() string { return h.c.logPath("hostlet-" + h.opts.NodeName) }

// Port is the kubelet API port hostlet serves on the cluster's NodeIP.
func (h *Hostlet) Port() int { return h.port }

// HealthzURL is hostlet's unauthenticated /healthz (--healthz-port on
// the node's IP, or its Host's).
func (h *Hostlet) HealthzURL() string {
	ip := h.c.NodeIP()
	if h.opts.Host != nil {
		ip = h.opts.Host.IP()
	}
	return "http://" + net.JoinHostPort(ip, fmt.Sprint(h.healthzPort)) + "/healthz"
}

// CgroupRoot is hostlet's --cgroup-root (cgroupfs form).
func (h *Hostlet) CgroupRoot() string { return h.c.inst.cgroupRoot() + "/" + h.opts.NodeName }

// RootDir is hostlet's --root-dir.
func (h *Hostlet) RootDir() string { return filepath.Join(h.c.dir, "hostlet", h.opts.NodeName) }

// PodLogsDir is the node's /var/log/pods (--pod-logs-dir), its own: a
// node's sweep removes the log directories of pods it does not know.
func (h *Hostlet) PodLogsDir() string { return filepath.Join(h.RootDir()+".var-log", "pods") }

// ContainerLogsDir is the node's /var/log/containers (--container-logs-dir).
func (h *Hostlet) ContainerLogsDir() string {
	return filepath.Join(h.RootDir()+".var-log", "containers")
}

// CRISocket is the node's --cri-socket, in a directory of its own beside
// its root dir (hostlet makes it root-only).
func (h *Hostlet) CRISocket() string { return filepath.Join(h.RootDir()+".run", "cri.sock") }

// Args is the full command line hostlet was started with (without argv[0]).
func (h *Hostlet) Args() []string { return append([]string(nil), h.args...) }

// Pid of the current hostlet process.
func (h *Hostlet) Pid() int { return h.process().pid() }

// Done is closed when the current hostlet process has exited.
func (h *Hostlet) Done() <-chan struct{} { return h.process().done }

// Exited reports whether the hostlet process has exited.
func (h *Hostlet) Exited() bool { return h.process().exited() }

// Stop sends SIGTERM and SIGKILL after 10s. Pods' containers keep running
// (they belong to containerd), as with a real kubelet.
func (h *Hostlet) Stop() { h.process().stop(10 * time.Second) }

// Kill SIGKILLs hostlet, simulating a crash.
func (h *Hostlet) Kill() { h.process().kill() }

// Restart stops hostlet gracefully and starts it again with the same flags,
// port and root dir, then waits for the node to be Ready (unless
// NoWaitReady was set).
func (h *Hostlet) Restart(ctx context.Context) error {
	h.Stop()
	started := time.Now()
	if err := h.start(); err != nil {
		return err
	}
	if h.opts.NoWaitReady {
		return nil
	}
	return h.waitReady(ctx, started)
}

// hostSwapOn says whether the host has any swap device or file active.
func hostSwapOn() bool {
	b, err := os.ReadFile("/proc/swaps")
	return err == nil && len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}

// hasFlag reports whether args set the flag name ("--x v" or "--x=v").
// hostNetnsArgs are the flags of a hostlet that runs in this machine's own
// network namespace (neither Options.NodeNetns nor a Host): the kubelet's
// iptables chains (makeIPTablesUtilChains, on by default) are not made in
// the machine's tables, as the harness's upstream kubelet makes none
// either. On the command line, so a configuration file saying true does
// not override it; ExtraArgs still may.
func hostNetnsArgs(c *Cluster, opts HostletOptions) []string {
	if c.net != nil || opts.Host != nil || hasFlag(opts.ExtraArgs, "--make-iptables-util-chains") {
		return nil
	}
	return []string{"--make-iptables-util-chains=false"}
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
)

// CRINamespace is where containerd's CRI plugin keeps the kubelet's images
// and containers.
const CRINamespace = "k8s.io"

// KubeletOptions says how to run the upstream kubelet as a node of the
// cluster, in hostlet's place (to compare the two on the same setup).
type KubeletOptions struct {
	// NodeName is the node's name. Required.
	NodeName string
	// SandboxImage is the pause image's reference; it must be among Images.
	SandboxImage string
	// Images are archives imported into the CRI containerd before the
	// kubelet starts (nothing is pulled).
	Images []string
	// ClusterDNS and ClusterDomain are the kubelet's clusterDNS and
	// clusterDomain (as hostlet's --cluster-dns, --cluster-domain).
	ClusterDNS, ClusterDomain string
	// SharedRootDir makes the root dir an rshared mount (bound onto
	// itself), as it is below a systemd host's shared /: containerd's CRI
	// refuses Bidirectional mount propagation from a private mount, and
	// this machine's / is private. CSI node plugins need it (hostlet does
	// the same for its root dir itself). Cluster.Stop unmounts it.
	SharedRootDir bool
	// Host, if set, runs the kubelet and its CRI containerd on that host
	// (Cluster.AddHost: its network and mount namespaces, its address)
	// instead of the cluster's node.
	Host *Host
	// CNIConfDir replaces the cluster's CNI config dir in the CRI's config
	// (a CNI DaemonSet's, e.g. FlannelDirs.Conf, empty until it runs);
	// ExtraCNIBinDirs are searched after the cluster's plugin dir.
	CNIConfDir      string
	ExtraCNIBinDirs []string
	// NoWaitReady returns once the kubelet started, without waiting for
	// the Node to be Ready (it is not until a CNI DaemonSet wrote its
	// config).
	NoWaitReady bool
	// ReadOnlyPort and HealthzPort, if set, are the kubelet's (on the node
	// address and 127.0.0.1, in the node's network namespace);
	// StaticPodPath its static pod manifests' directory (made). The node
	// e2e suite reads all three through /configz.
	ReadOnlyPort, HealthzPort int
	StaticPodPath             string
	// Address, if set, is where the kubelet API and the read-only port
	// listen instead of the node's address (e.g. 0.0.0.0, in the node's
	// network namespace).
	Address string
}

// Kubelet is the upstream kubelet (test/cluster/build.sh kubelet, the
// pinned release) running as a node against a containerd of its own with
// the CRI plugin, both in the node's network namespace with
// Options.NodeNetns (or on a Host, KubeletOptions.Host), on the cluster's
// CNI config (bridge, pod subnet) unless KubeletOptions says another.
type Kubelet struct {
	dir     string
	root    string
	name    string
	cri     *Process
	client  *containerd.Client
	kubelet *Process
	restore func() error
	logf    func(string, ...any)
}

// KubeletConfig is what KubeletConfigYAML needs to know.
type KubeletConfig struct {
	Address                     string // where the kubelet API listens
	Port                        int
	CertFile, KeyFile, ClientCA string
	CgroupRoot                  string // must exist (MakeCgroupRoot)
	CRISocket                   string // containerd's, with the CRI plugin
	PodLogsDir, VolumePluginDir string
	ClusterDNS, ClusterDomain   string // optional
	// MaxPods is the node's pod capacity; 0: the kubelet's default (110).
	MaxPods int
	// ReadOnlyPort, HealthzPort (on 127.0.0.1) and StaticPodPath, optional:
	// off without them.
	ReadOnlyPort, HealthzPort int
	StaticPodPath             string
}

// KubeletConfigYAML is the kubelet's KubeletConfiguration: cgroupfs, the
// same authn/authz a real node has (x509 client CA and webhooks), and what
// would act on the shared machine switched off or made lenient (no eviction
// or image GC, no iptables chains, no healthz port on a fixed number unless
// asked for, pod logs and plugins where the caller says).
func KubeletConfigYAML(k KubeletConfig) string {
	s := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: %[10]d
healthzPort: %[11]d
healthzBindAddress: 127.0.0.1
tlsCertFile: %[3]q
tlsPrivateKeyFile: %[4]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[5]q
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %[6]q
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[7]s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
makeIPTablesUtilChains: false
oomScoreAdj: 0
podLogsDir: %[8]q
volumePluginDir: %[9]q
`, k.Address, k.Port, k.CertFile, k.KeyFile, k.ClientCA, k.CgroupRoot, k.CRISocket, k.PodLogsDir, k.VolumePluginDir,
		k.ReadOnlyPort, k.HealthzPort)
	if k.ClusterDNS != "" {
		s += fmt.Sprintf("clusterDNS: [%q]\nclusterDomain: %q\n", k.ClusterDNS, k.ClusterDomain)
	}
	if k.MaxPods > 0 {
		s += fmt.Sprintf("maxPods: %d\n", k.MaxPods)
	}
	if k.StaticPodPath != "" {
		s += fmt.Sprintf("staticPodPath: %q\n", k.StaticPodPath)
	}
	return s
}

// kubeletSysctls are the kernel settings the kubelet rewrites at start
// (setupKernelTunables). They are global, not per network namespace, and
// this is a shared machine: Stop puts them back.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// StartKubelet starts the CRI containerd, imports opts.Images, then the
// kubelet, and (unless opts.NoWaitReady) waits until the node is Ready.
// Its state, logs and cgroups are the cluster's (<dir>/kubelet/<name> and the
// root dir <dir>/root/<name>, the
// cluster's cgroup root), so Cluster.Stop's sweep catches what Kubelet.Stop
// leaves; call Kubelet.Stop first.
func (c *Cluster) StartKubelet(ctx context.Context, opts KubeletOptions) (*Kubelet, error) {
	bin, err := BuildComponent(ctx, c.logf, "kubelet")
	if err != nil {
		return nil, err
	}
	// The root dir as short as hostlet's (<dir>/hostlet/<name>): a unix
	// socket's path has at most 107 bytes, and the CSI drivers e2e.test
	// deploys register as <root>/plugins_registry/<long name>-reg.sock.
	k := &Kubelet{dir: filepath.Join(c.dir, "kubelet", opts.NodeName), root: filepath.Join(c.dir, "root", opts.NodeName),
		name: opts.NodeName, logf: c.logf}
	ok := false
	defer func() {
		if !ok {
			k.Stop()
		}
	}()
	if err := k.startCRI(ctx, c, opts); err != nil {
		return nil, err
	}
	cgroupRoot := c.inst.cgroupRoot() + "/kubelet-" + opts.NodeName
	if err := MakeCgroupRoot(cgroupRoot); err != nil {
		return nil, err
	}
	if k.restore, err = saveSysctls(); err != nil {
		return nil, err
	}
	kubeconfig, err := c.NodeKubeconfig(opts.NodeName)
	if err != nil {
		return nil, err
	}
	nodeIP, command := c.NodeIP(), c.net.command
	cert, key, err := c.KubeletServingCert(opts.NodeName)
	if opts.Host != nil {
		nodeIP, command = opts.Host.IP(), opts.Host.command
		cert, key, err = opts.Host.servingCert(opts.NodeName)
	}
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	root := k.RootDir()
	if opts.SharedRootDir {
		if err := bindShared(root); err != nil {
			return nil, err
		}
	}
	addr := nodeIP
	if opts.Address != "" {
		addr = opts.Address
	}
	cfg := KubeletConfigYAML(KubeletConfig{
		Address: addr, Port: ports[0], CertFile: cert, KeyFile: key, ClientCA: c.pki.CACert,
		CgroupRoot: cgroupRoot, CRISocket: ContainerdSocketIn(k.criDir()),
		PodLogsDir: filepath.Join(k.dir, "pod-logs"), VolumePluginDir: filepath.Join(k.dir, "volume-plugins"),
		ClusterDNS: opts.ClusterDNS, ClusterDomain: opts.ClusterDomain,
		ReadOnlyPort: opts.ReadOnlyPort, HealthzPort: opts.HealthzPort, StaticPodPath: opts.StaticPodPath,
	})
	if opts.StaticPodPath != "" {
		if err := os.MkdirAll(opts.StaticPodPath, 0o755); err != nil {
			return nil, err
		}
	}
	cfgPath := filepath.Join(k.dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	args := []string{
		"--config", cfgPath,
		"--kubeconfig", kubeconfig,
		"--hostname-override", opts.NodeName,
		"--node-ip", nodeIP,
		"--root-dir", root,
		"--cert-dir", filepath.Join(root, "pki"),
	}
	if c.net != nil {
		args = append(args, "--node-labels", NodeNetnsLabel+"=true")
	}
	env := append(os.Environ(), "PATH="+c.binDir+":"+os.Getenv("PATH"))
	b, a := command(bin, args...)
	if k.kubelet, err = StartProcess("kubelet", c.logPath("kubelet-"+opts.NodeName), env, b, a...); err != nil {
		return nil, err
	}
	if !opts.NoWaitReady {
		if err := c.WaitProcessNodeReady(ctx, k.kubelet, opts.NodeName); err != nil {
			return nil, err
		}
	}
	ok = true
	return k, nil
}

// bindShared binds dir (made if missing) onto itself and makes it rshared.
func bindShared(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s rshared: %w", dir, err)
	}
	return nil
}

// RootDir is the kubelet's --root-dir.
func (k *Kubelet) RootDir() string { return k.root }

// NodeName is the node the kubelet registers.
func (k *Kubelet) NodeName() string { return k.name }

// Process is the kubelet's process (for WaitProcessNodeReady).
func (k *Kubelet) Process() *Process { return k.kubelet }

func (k *Kubelet) criDir() string { return filepath.Join(k.dir, "containerd") }

// CRISocket is the kubelet's containerd socket (its CRI endpoint).
func (k *Kubelet) CRISocket() string { return ContainerdSocketIn(k.criDir()) }

// HostsDir is the registry hosts directory of the kubelet's containerd (its
// config_path), for AllowInsecureRegistryIn.
func (k *Kubelet) HostsDir() string { return filepath.Join(k.criDir(), "certs.d") }

// startCRI starts the kubelet's containerd (CRI on, the cluster's CNI
// config and plugins) and imports the images into its CRI namespace.
func (k *Kubelet) startCRI(ctx context.Context, c *Cluster, opts KubeletOptions) error {
	for _, d := range []string{filepath.Join(k.dir, "pod-logs"), filepath.Join(k.dir, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cri := &CRIConfig{SandboxImage: opts.SandboxImage, CNIBinDir: c.CNIBinDir(), CNIConfDir: c.CNIConfDir(),
		ExtraCNIBinDirs: opts.ExtraCNIBinDirs}
	if opts.CNIConfDir != "" {
		cri.CNIConfDir = opts.CNIConfDir
	}
	cfgPath, err := WriteContainerdConfig(k.criDir(), cri)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "PATH="+c.binDir+":"+os.Getenv("PATH"))
	command := c.net.command
	if opts.Host != nil {
		command = opts.Host.command
	}
	b, a := command(filepath.Join(c.binDir, "containerd"), "--config", cfgPath)
	if k.cri, err = StartProcess("cri-containerd", c.logPath("cri-containerd-"+opts.NodeName), env, b, a...); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = k.cri.WaitFor(wctx, "its socket", 100*time.Millisecond, func(ctx context.Context) (err error) {
		k.client, err = DialContainerd(ctx, ContainerdSocketIn(k.criDir()), CRINamespace)
		return err
	})
	if err != nil {
		return err
	}
	for _, img := range opts.Images {
		if err := k.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage imports an OCI or docker archive into the CRI namespace and
// unpacks it, so the kubelet finds it present (as Cluster.ImportImage does
// for hostlet).
func (k *Kubelet) ImportImage(ctx context.Context, archive string) error {
	_, err := ImportArchive(ctx, k.client, CRINamespace, archive)
	return err
}

// Stop stops the kubelet, removes the containers it left (so the shims
// exit and unmount cleanly), stops its containerd and puts the kernel
// settings back. Safe on a partly started Kubelet.
func (k *Kubelet) Stop() {
	k.kubelet.Stop(15 * time.Second)
	if k.client != nil {
		RemoveAllContainers(context.Background(), k.client, k.logf)
		k.client.Close()
	}
	k.cri.Stop(10 * time.Second)
	if k.restore != nil {
		if err := k.restore(); err != nil {
			k.logf("harness: kubelet: restoring kernel settings: %v", err)
		}
	}
}

// WaitProcessNodeReady waits for the Node to be Ready, giving up early if
// the process behind it (a kubelet) exits.
func (c *Cluster) WaitProcessNodeReady(ctx context.Context, p *Process, name string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := c.WaitNodeReady(ctx, name); err != nil {
		return p.Failure(err)
	}
	return nil
}

// MakeCgroupRoot creates root in every hierarchy: the kubelet refuses a
// cgroupRoot that does not exist.
func MakeCgroupRoot(root string) error {
	mounts, err := CgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(m, root), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// saveSysctls reads kubeletSysctls and returns the function that writes
// them back.
func saveSysctls() (restore func() error, err error) {
	saved := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, err
		}
		saved[k] = strings.TrimSpace(string(b))
	}
	return func() error {
		var errs []string
		for k, v := range saved {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}, nil
}

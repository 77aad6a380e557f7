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
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
)

// ContainerdNamespace is the containerd namespace hostlet keeps its
// containers and images in.
const ContainerdNamespace = "hostlet"

// containerdConfig is a private containerd: own root, state and sockets
// under dir, and every plugin that would otherwise touch a host-global path
// (NRI socket, /opt, conf.d imports) either disabled or pointed into dir, so
// several clusters and the host's own containerd never see each other.
// %[8]s lists the further plugins to disable and %[9]s is appended (the CRI
// plugin's sections, when on).
const containerdConfig = `version = 3
root = %[1]q
state = %[2]q
imports = []
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.mount-handler.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
%[8]s]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

# The transfer service requires an image verifier; give it an empty dir.
[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = %[7]q

[plugins."io.containerd.transfer.v1.local"]
  config_path = %[6]q
%[9]s`

// noCRI disables the CRI plugin: hostlet talks to containerd directly.
const noCRI = `  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.runtime",
  "io.containerd.cri.v1.images",
  "io.containerd.podsandbox.controller.v1.podsandbox",
`

// criConfig turns the CRI plugin on for the upstream kubelet: cgroupfs;
// oom_score_adj clamped (without CAP_SYS_RESOURCE a negative one makes runc
// fail); the locally imported pause image as sandbox image; its own CNI
// config; network namespaces under the state dir (not the host-global
// /var/run/netns) so a crashed run's leftovers are swept with the dir.
const criConfig = `
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[1]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[2]q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[3]s]
    conf_dir = %[4]q
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    SystemdCgroup = false
`

// CRIConfig turns on containerd's CRI plugin in WriteContainerdConfig.
type CRIConfig struct {
	SandboxImage, CNIBinDir, CNIConfDir string
	// ExtraCNIBinDirs are plugin dirs searched after CNIBinDir (a CNI
	// DaemonSet's, which delegates to the harness's bridge and IPAM).
	ExtraCNIBinDirs []string
	// Runtimes are runtime handlers beside runc, as a user adds them for
	// RuntimeClasses.
	Runtimes []CRIRuntime
	// DefaultRuntime names the runtime of pods without a RuntimeClass
	// (containerd's default_runtime_name); empty: runc.
	DefaultRuntime string
}

// CRIRuntime is a runtime handler in containerd's CRI config: its name
// (a RuntimeClass's handler), runtime type and the runc shim's BinaryName
// and Root options (left out when empty).
type CRIRuntime struct {
	Name, Type, BinaryName, Root string
}

// toml is the runtime's table in the CRI plugin's config.
func (r CRIRuntime) toml() string {
	table := fmt.Sprintf(`plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%q`, r.Name)
	s := fmt.Sprintf("  [%s]\n    runtime_type = %q\n", table, r.Type)
	if r.BinaryName == "" && r.Root == "" {
		return s
	}
	s += fmt.Sprintf("    [%s.options]\n", table)
	if r.BinaryName != "" {
		s += fmt.Sprintf("      BinaryName = %q\n", r.BinaryName)
	}
	if r.Root != "" {
		s += fmt.Sprintf("      Root = %q\n", r.Root)
	}
	return s
}

// ContainerdSocketIn is the gRPC socket of a containerd configured by
// WriteContainerdConfig(dir, ...) (its ttrpc socket adds ".ttrpc").
func ContainerdSocketIn(dir string) string { return filepath.Join(dir, "containerd.sock") }

// WriteContainerdConfig writes <dir>/config.toml for a private containerd
// with its root, state, sockets and registry hosts (certs.d) under dir, the
// CRI plugin off unless cri is set, and returns the file's path.
func WriteContainerdConfig(dir string, cri *CRIConfig) (string, error) {
	return writeContainerdConfig(dir, cri, nil)
}

// writeContainerdConfig is WriteContainerdConfig with proxy snapshotters
// (name: socket) in containerd's proxy_plugins.
func writeContainerdConfig(dir string, cri *CRIConfig, proxySnapshotters map[string]string) (string, error) {
	for _, sub := range []string{"root", "state", "opt", "certs.d", "image-verifier"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return "", err
		}
	}
	sock := ContainerdSocketIn(dir)
	if n := len(sock) + len(".ttrpc"); n > 100 {
		return "", fmt.Errorf("containerd socket path %q too long for a unix socket; use a shorter dir", sock)
	}
	hosts := filepath.Join(dir, "certs.d")
	disabled, extra := noCRI, ""
	if cri != nil {
		binDirs := fmt.Sprintf("%q", cri.CNIBinDir)
		for _, d := range cri.ExtraCNIBinDirs {
			binDirs += fmt.Sprintf(", %q", d)
		}
		disabled, extra = "", fmt.Sprintf(criConfig, cri.SandboxImage, hosts, binDirs, cri.CNIConfDir)
		if cri.DefaultRuntime != "" {
			extra += fmt.Sprintf("  [plugins.\"io.containerd.cri.v1.runtime\".containerd]\n    default_runtime_name = %q\n", cri.DefaultRuntime)
		}
		for _, rt := range cri.Runtimes {
			extra += rt.toml()
		}
	}
	extra += proxyPlugins(proxySnapshotters)
	cfg := fmt.Sprintf(containerdConfig,
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc",
		filepath.Join(dir, "opt"), hosts, filepath.Join(dir, "image-verifier"), disabled, extra)
	path := filepath.Join(dir, "config.toml")
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// containerdPaths are all derived from the cluster dir.
func (c *Cluster) containerdDir() string { return filepath.Join(c.dir, "containerd") }

// ContainerdSocket is the gRPC socket of the cluster's private containerd.
func (c *Cluster) ContainerdSocket() string { return ContainerdSocketIn(c.containerdDir()) }

// ContainerdHostsDir is the containerd v2 registry hosts directory
// (<dir>/<host:port>/hosts.toml), the same format as /etc/containerd/certs.d.
// The daemon's transfer service reads it; clients that resolve themselves
// (hostlet's pull path) should pass it as their config_path / HostDir.
func (c *Cluster) ContainerdHostsDir() string { return filepath.Join(c.containerdDir(), "certs.d") }

// AllowInsecureRegistry lets hostPort (e.g. "127.0.0.1:5000") be pulled
// from over plain HTTP, by writing its hosts.toml into ContainerdHostsDir.
func (c *Cluster) AllowInsecureRegistry(hostPort string) error {
	return AllowInsecureRegistryIn(c.ContainerdHostsDir(), hostPort)
}

// AllowInsecureRegistryIn writes hostPort's hosts.toml (plain HTTP) into a
// registry hosts directory: another containerd's certs.d (a CRI
// containerd's config_path), as AllowInsecureRegistry does the cluster's.
func AllowInsecureRegistryIn(hostsDir, hostPort string) error {
	d := filepath.Join(hostsDir, hostPort)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n",
		"http://"+hostPort, "http://"+hostPort)
	return os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(toml), 0o644)
}

// startContainerd writes the private config and starts the daemon. Its
// PATH has the bin dir first so it finds our containerd-shim-runc-v2, and
// the shim our runc. With NodeNetns it runs in the node's network namespace
// (so do its shims and host-network containers). containerd dies with us (Pdeathsig); the shims it
// spawns deliberately do not (they setsid), Stop and stale-instance cleanup
// deal with them.
func (c *Cluster) startContainerd() (*process, error) {
	var cri *CRIConfig
	if c.crun != "" {
		// A pause image only for the config's sake: no sandbox is asked
		// of the CRI plugin (hostlet makes its own).
		withCrun := CRIConfig{SandboxImage: "registry.k8s.io/pause:3.10", CNIBinDir: c.CNIBinDir(), CNIConfDir: c.CNIConfDir()}.
			WithCrun(c.crun, filepath.Join(c.containerdDir(), "crun-root"))
		cri = &withCrun
	}
	cfgPath, err := WriteContainerdConfig(c.containerdDir(), cri)
	if err != nil {
		return nil, err
	}
	bin, args := c.net.command(filepath.Join(c.binDir, "containerd"), "--config", cfgPath)
	return c.launch("containerd", bin, args...)
}

// waitContainerd waits until the daemon answers on its socket and keeps a
// client for ImportImage and for cleanup at Stop.
func (c *Cluster) waitContainerd(ctx context.Context, p *process) error {
	return p.waitFor(ctx, "containerd socket", 50*time.Millisecond, func(ctx context.Context) error {
		cl, err := DialContainerd(ctx, c.ContainerdSocket(), ContainerdNamespace)
		if err == nil {
			c.ctrd = cl
		}
		return err
	})
}

// DialContainerd connects to the containerd at socket with namespace ns as
// default and checks that it answers.
func DialContainerd(ctx context.Context, socket, ns string) (*containerd.Client, error) {
	if _, err := os.Stat(socket); err != nil {
		return nil, err
	}
	cl, err := containerd.New(socket, containerd.WithDefaultNamespace(ns), containerd.WithTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	if _, err := cl.Version(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// ContainerdClient returns a client of the cluster's containerd with the
// "hostlet" namespace as default. Owned by the Cluster: do not Close it.
func (c *Cluster) ContainerdClient() *containerd.Client { return c.ctrd }

// ImportImage imports an OCI (or docker-save) archive into the "hostlet"
// namespace and unpacks it for the overlayfs snapshotter, like
// `ctr -n hostlet images import` does. Image names come from the archive's
// io.containerd.image.name or org.opencontainers.image.ref.name annotations.
func (c *Cluster) ImportImage(ctx context.Context, archivePath string) error {
	_, err := c.importImage(ctx, archivePath)
	return err
}

func (c *Cluster) importImage(ctx context.Context, archivePath string) ([]string, error) {
	if c.ctrd == nil {
		return nil, fmt.Errorf("containerd is not running")
	}
	return ImportArchive(ctx, c.ctrd, ContainerdNamespace, archivePath)
}

// ImportArchive imports an OCI (or docker-save) archive into namespace ns of
// cl's containerd, unpacks it for the overlayfs snapshotter and returns the
// image names.
func ImportArchive(ctx context.Context, cl *containerd.Client, ns, archivePath string) ([]string, error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx = namespaces.WithNamespace(ctx, ns)
	imgs, err := cl.Import(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", archivePath, err)
	}
	var names []string
	for _, img := range imgs {
		image := containerd.NewImageWithPlatform(cl, img, platforms.DefaultStrict())
		if err := image.Unpack(ctx, "overlayfs"); err != nil {
			return nil, fmt.Errorf("unpack %s from %s: %w", img.Name, archivePath, err)
		}
		names = append(names, img.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("import %s: no named image in archive (annotate the index manifests with io.containerd.image.name)", archivePath)
	}
	return names, nil
}

// removeAllTasks removes every container of the cluster's containerd; what
// survives is handled by killShims afterwards.
func (c *Cluster) removeAllTasks(ctx context.Context) {
	if c.ctrd != nil {
		RemoveAllContainers(ctx, c.ctrd, c.logf)
	}
}

// RemoveAllContainers kills and deletes every task and container in every
// namespace of cl's containerd through the API, so shims exit cleanly and
// remove their rootfs mounts and sockets.
func RemoveAllContainers(ctx context.Context, cl *containerd.Client, logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	nss, err := cl.NamespaceService().List(ctx)
	if err != nil {
		logf("containerd cleanup: list namespaces: %v", err)
		return
	}
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := cl.Containers(nctx)
		if err != nil {
			continue
		}
		for _, ctr := range ctrs {
			if task, err := ctr.Task(nctx, nil); err == nil {
				_ = task.Kill(nctx, syscall.SIGKILL, containerd.WithKillAll)
				if _, err := task.Delete(nctx, containerd.WithProcessKill); err != nil && !strings.Contains(err.Error(), "not found") {
					logf("containerd cleanup: delete task %s/%s: %v", ns, ctr.ID(), err)
				}
			}
			_ = ctr.Delete(nctx, containerd.WithSnapshotCleanup)
		}
	}
}

// StopContainerd stops the cluster's containerd (SIGTERM, then SIGKILL
// after 10 s), leaving containers and their shims running, to simulate a
// runtime outage. Only for clusters no other test shares.
func (c *Cluster) StopContainerd() {
	c.mu.Lock()
	p := c.procs["containerd"]
	c.mu.Unlock()
	p.stop(10 * time.Second)
}

// SignalContainerd sends sig to the cluster's containerd process alone
// (not its shims): SIGSTOP freezes it, its socket still accepting while
// nothing answers, as a hung containerd; SIGCONT thaws it.
func (c *Cluster) SignalContainerd(sig syscall.Signal) error {
	c.mu.Lock()
	p := c.procs["containerd"]
	c.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("containerd is not running")
	}
	return syscall.Kill(p.pid(), sig)
}

// StartContainerd starts containerd again with the same config after
// StopContainerd and waits until it answers.
func (c *Cluster) StartContainerd(ctx context.Context) error {
	if c.ctrd != nil {
		c.ctrd.Close()
		c.ctrd = nil
	}
	p, err := c.startContainerd()
	if err != nil {
		return err
	}
	return c.waitContainerd(ctx, p)
}

// Containerd is a further containerd of a cluster (AddContainerd), for a
// hostlet whose runtime needs a config of its own (runtime handlers):
// its own root, state and sockets under the cluster's dir.
type Containerd struct {
	c      *Cluster
	name   string
	dir    string
	cfg    string // its config.toml, for Start after Kill
	proc   *process
	client *containerd.Client
}

// AddContainerd starts containerd name with the CRI plugin on as cri says
// (the cluster's CNI config and plugins unless cri names others), in the
// node's network namespace with Options.NodeNetns, and waits until it
// answers. A hostlet uses it with --container-runtime-endpoint
// unix://<Socket()> in its ExtraArgs. Stop (or the cluster's Stop, which
// sweeps whatever names the cluster's dir) takes it down.
func (c *Cluster) AddContainerd(ctx context.Context, name string, cri CRIConfig) (*Containerd, error) {
	d := &Containerd{c: c, name: name, dir: filepath.Join(c.dir, "containerd-"+name)}
	if cri.CNIBinDir == "" {
		cri.CNIBinDir = c.CNIBinDir()
	}
	if cri.CNIConfDir == "" {
		cri.CNIConfDir = c.CNIConfDir()
	}
	cfg, err := writeContainerdConfig(d.dir, &cri, nil)
	if err != nil {
		return nil, err
	}
	return c.startContainerdIn(ctx, d, cfg)
}

// AddContainerdWithSnapshotters starts containerd name as AddContainerd does,
// with the CRI plugin off (as hostlet's nodes run it) and proxySnapshotters
// (name: unix socket, e.g. a StargzSnapshotter's) as its proxy_plugins.
func (c *Cluster) AddContainerdWithSnapshotters(ctx context.Context, name string, proxySnapshotters map[string]string) (*Containerd, error) {
	d := &Containerd{c: c, name: name, dir: filepath.Join(c.dir, "containerd-"+name)}
	cfg, err := writeContainerdConfig(d.dir, nil, proxySnapshotters)
	if err != nil {
		return nil, err
	}
	return c.startContainerdIn(ctx, d, cfg)
}

// startContainerdIn starts d's containerd with config cfg and waits until
// it answers.
func (c *Cluster) startContainerdIn(ctx context.Context, d *Containerd, cfg string) (*Containerd, error) {
	var err error
	d.cfg = cfg
	bin, args := c.net.command(filepath.Join(c.binDir, "containerd"), "--config", cfg)
	env := append(os.Environ(), "PATH="+c.binDir+":"+os.Getenv("PATH"))
	if d.proc, err = startProcess("containerd-"+d.name, c.logPath("containerd-"+d.name), env, true, bin, args...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = d.proc.waitFor(ctx, "containerd "+d.name, 50*time.Millisecond, func(ctx context.Context) error {
		cl, err := DialContainerd(ctx, d.Socket(), ContainerdNamespace)
		if err == nil {
			d.client = cl
		}
		return err
	})
	if err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// Kill SIGKILLs the containerd, a crash of the runtime: its shims (each in
// a session of its own) and their containers keep running, as on a host.
// Start brings it back.
func (d *Containerd) Kill() {
	d.proc.kill()
	if d.client != nil {
		d.client.Close()
		d.client = nil
	}
}

// Start starts the containerd again with the same config after Kill and
// waits until it answers (it reconnects to the shims that kept running).
func (d *Containerd) Start(ctx context.Context) error {
	if d.proc != nil && !d.proc.exited() {
		return fmt.Errorf("containerd %s is still running", d.name)
	}
	_, err := d.c.startContainerdIn(ctx, d, d.cfg)
	return err
}

// Socket is the containerd's gRPC socket.
func (d *Containerd) Socket() string { return ContainerdSocketIn(d.dir) }

// Dir holds the containerd's root, state and config.
func (d *Containerd) Dir() string { return d.dir }

// Client is a client of the containerd with hostlet's namespace as
// default. Owned by d: do not Close it.
func (d *Containerd) Client() *containerd.Client { return d.client }

// ImportImage imports an image archive into hostlet's namespace of the
// containerd, as Cluster.ImportImage does into the node's.
func (d *Containerd) ImportImage(ctx context.Context, archivePath string) error {
	_, err := ImportArchive(ctx, d.client, ContainerdNamespace, archivePath)
	return err
}

// Stop removes the containerd's containers (so their shims exit and
// unmount cleanly), then stops it. Safe to call more than once.
func (d *Containerd) Stop() {
	if d.client != nil {
		RemoveAllContainers(context.Background(), d.client, d.c.logf)
		d.client.Close()
		d.client = nil
	}
	d.proc.stop(10 * time.Second)
	// Shims left behind name the dir.
	killProcsUnder([]string{d.dir}, d.c.runc(), nil, d.c.logf)
}

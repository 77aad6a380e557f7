package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1" // first IP of serviceCIDR: the "kubernetes" Service
)

// Options configure Start. The zero value is a fine default for tests.
type Options struct {
	// Dir holds all state. Empty: a new temp dir, removed by Stop unless
	// KeepDir. Non-empty: a stable dir (e.g. for make dev); the harness's
	// entries in it (logs, pki, etcd, containerd, cni, hostlet, kubeconfig)
	// left by a previous cluster are cleaned up first, and on Stop removed
	// unless KeepDir. Anything else in it is left alone.
	Dir string
	// KeepDir keeps the dir (logs, PKI, etcd data) after Stop.
	KeepDir bool
	// BinDir holds etcd, kube-*, kubectl, containerd*, ctr and runc. Empty:
	// $HOSTLET_BIN_DIR if set, else whatever test/cluster/build.sh prints.
	BinDir string
	// Logf receives progress messages (e.g. t.Logf). Nil: silent.
	Logf func(format string, args ...any)
	// StartTimeout bounds Start after the binaries are built. Default 2m.
	StartTimeout time.Duration
	// Extra flags appended to each component's command line.
	APIServerArgs, ControllerManagerArgs, SchedulerArgs []string
	// NodeNetns runs the cluster's containerd and hostlets in a network
	// namespace of their own, linked to the root one by a veth pair with
	// addresses from a /24 of 10.243.0.0/16 the harness picks: nodes get a
	// real address (NodeIP), which the API server's node proxy accepts and
	// NodePorts answer on, and whatever edits the node's iptables
	// (kube-proxy) stays inside it. The API server then binds and
	// advertises the root end of the pair instead of 127.0.0.1.
	NodeNetns bool
	// NodeCIDRMaskSize, if set, has the controller-manager allocate each
	// node a pod CIDR of this prefix length out of PodSubnet
	// (--allocate-node-cidrs), as a cluster whose CNI DaemonSet reads
	// node.spec.podCIDRs (flannel's --kube-subnet-mgr) runs it.
	NodeCIDRMaskSize int
	// Runtime is the OCI runtime of the cluster's containerd: "" (runc,
	// with the CRI plugin off, as hostlet's nodes usually run it) or
	// "crun" (test/cluster/build.sh crun; the CRI plugin on with crun as
	// its default runtime and runc beside it, as a user configures a host
	// whose pods run on crun).
	Runtime string
}

// Cluster is a running local cluster. Methods are safe for concurrent use.
type Cluster struct {
	opts   Options
	dir    string
	binDir string
	crun   string // crun's binary when Options.Runtime is crun
	inst   *instance
	net    *nodeNet // nil unless Options.NodeNetns
	pki    *pki
	ports  struct{ etcdClient, etcdPeer, apiserver int }

	adminKubeconfig string
	restConfig      *rest.Config
	client          kubernetes.Interface
	ctrd            *containerd.Client

	mu       sync.Mutex
	procs    map[string]*process
	hostlets map[string]*Hostlet
	stopOnce sync.Once
	// StartDuration is how long Start took, including build.sh.
	StartDuration time.Duration
}

// Start brings up the whole cluster and returns once the apiserver is ready,
// namespace "default" has its ServiceAccount and kube-root-ca.crt ConfigMap,
// and containerd answers. On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	t0 := time.Now()
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("harness: must run as root (containerd, runc, CNI)")
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir = os.Getenv("HOSTLET_BIN_DIR")
	}
	if binDir == "" {
		var err error
		if binDir, err = BuildComponents(ctx, opts.Logf); err != nil {
			return nil, err
		}
	}
	if err := checkBinaries(binDir); err != nil {
		return nil, err
	}
	var crun string
	switch opts.Runtime {
	case "", "runc":
	case "crun":
		var err error
		if crun, err = BuildCrun(ctx, opts.Logf); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("runtime %q: want runc or crun", opts.Runtime)
	}

	c := &Cluster{opts: opts, binDir: binDir, crun: crun, procs: map[string]*process{}, hostlets: map[string]*Hostlet{}}
	var err error
	if opts.Dir != "" {
		c.dir, err = filepath.Abs(opts.Dir)
	} else {
		c.dir, err = os.MkdirTemp("", "hostlet-e2e-")
		if err == nil {
			// Searchable like /run/containerd on a host: the root of a pod
			// in a user namespace is not the host's root, and runc in it
			// walks to the container's rootfs under containerd's state.
			err = os.Chmod(c.dir, 0o711)
		}
	}
	if err != nil {
		return nil, err
	}
	if c.inst, err = reserve(c.dir, binDir, opts.Dir == "", opts.KeepDir, opts.NodeNetns, opts.Logf); err != nil {
		if opts.Dir == "" {
			os.RemoveAll(c.dir)
		}
		return nil, err
	}
	if err := c.start(ctx, t0); err != nil {
		opts.Logf("harness: start failed, logs in %s", c.LogDir())
		c.Stop()
		return nil, err
	}
	return c, nil
}

// start brings the components up in dependency order.
func (c *Cluster) start(ctx context.Context, t0 time.Time) error {
	tBuilt := time.Now()
	if c.opts.Dir != "" {
		// A stable dir may hold a previous run's state: start from scratch.
		cleanupLeftovers(cleanupSpec{dir: c.dir, runc: c.runc(), removeDir: true}, c.logf)
	}
	if err := os.MkdirAll(c.LogDir(), 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	if err := c.allocatePorts(); err != nil {
		return err
	}
	var err error
	apiIPs := []net.IP{net.ParseIP(serviceIP)}
	if c.inst.NodeNetns != "" {
		c.net = &nodeNet{netns: c.inst.NodeNetns, veth: c.inst.NodeVeth, subnet: c.inst.NodeSubnet}
		if err := c.net.setup(c.inst.Subnet); err != nil {
			return fmt.Errorf("node network namespace: %w", err)
		}
		apiIPs = append(apiIPs, net.ParseIP(c.net.rootIP()))
	}
	if c.pki, err = newPKI(filepath.Join(c.dir, "pki"), apiIPs...); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := c.writeAdminKubeconfig(); err != nil {
		return err
	}
	if err := c.writeCNIConfig(); err != nil {
		return fmt.Errorf("cni config: %w", err)
	}

	// containerd needs nothing from the rest: it comes up in parallel. The
	// waiter never outlives start (it sets c.ctrd, which Stop reads).
	ctrd, err := c.startContainerd()
	if err != nil {
		return err
	}
	var ctrdErr error
	ctrdDone := make(chan struct{})
	go func() {
		defer close(ctrdDone)
		ctrdErr = c.waitContainerd(ctx, ctrd)
	}()
	defer func() { cancel(); <-ctrdDone }()

	etcd, err := c.startEtcd()
	if err != nil {
		return err
	}
	// etcd is ready in a fraction of a second; waiting for it spares the
	// apiserver log a screenful of connection errors and points a failure
	// at the right component.
	if err := c.waitEtcd(ctx, etcd); err != nil {
		return err
	}
	apiserver, err := c.startAPIServer()
	if err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, apiserver); err != nil {
		return err
	}
	tAPI := time.Now()
	cm, err := c.startControllerManager()
	if err != nil {
		return err
	}
	if _, err := c.startScheduler(); err != nil {
		return err
	}
	if err := c.waitNamespaceReady(ctx, cm, "default"); err != nil {
		return err
	}
	<-ctrdDone
	if ctrdErr != nil {
		return ctrdErr
	}
	c.StartDuration = time.Since(t0)
	c.logf("harness: cluster up in %v (binaries %v, apiserver ready after %v, controllers %v) dir=%s bridge=%s subnet=%s",
		c.StartDuration.Round(time.Millisecond), tBuilt.Sub(t0).Round(time.Millisecond),
		tAPI.Sub(tBuilt).Round(time.Millisecond), time.Since(tAPI).Round(time.Millisecond),
		c.dir, c.inst.Bridge, c.inst.Subnet)
	return nil
}

// launch starts a component with its log in <dir>/logs/<name>.log and the
// bin dir first in PATH, and registers it for Stop.
func (c *Cluster) launch(name, bin string, args ...string) (*process, error) {
	env := append(os.Environ(), "PATH="+c.binDir+":"+os.Getenv("PATH"))
	p, err := startProcess(name, c.logPath(name), env, true, bin, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) cleanupSpec(removeDir bool, spare map[int]bool) cleanupSpec {
	return cleanupSpec{dir: c.dir, temp: c.inst.Temp, bridge: c.inst.Bridge, netns: c.inst.NodeNetns, veth: c.inst.NodeVeth,
		runc: c.runc(), removeDir: removeDir, spare: spare, cgroup: c.inst.cgroupRoot()}
}

func (c *Cluster) runc() string { return filepath.Join(c.binDir, "runc") }

func (c *Cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

func (c *Cluster) logf(format string, args ...any) { c.opts.Logf(format, args...) }

// allocatePorts asks the kernel for free loopback ports. Listeners are held
// until all are chosen so the same port is not handed out twice.
func (c *Cluster) allocatePorts() error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	c.ports.etcdClient, c.ports.etcdPeer, c.ports.apiserver = ports[0], ports[1], ports[2]
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) writeAdminKubeconfig() error {
	cert, err := os.ReadFile(c.pki.AdminCert)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(c.pki.AdminKey)
	if err != nil {
		return err
	}
	c.adminKubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := writeKubeconfig(c.adminKubeconfig, c.APIServerURL(), "admin", c.pki.caPEM, cert, key); err != nil {
		return err
	}
	if c.restConfig, err = clientcmd.BuildConfigFromFlags("", c.adminKubeconfig); err != nil {
		return err
	}
	// Tests create and watch many objects quickly; don't throttle them.
	c.restConfig.QPS, c.restConfig.Burst = 200, 400
	c.client, err = kubernetes.NewForConfig(c.restConfig)
	return err
}

// Dir is the directory holding all of the cluster's state and logs.
func (c *Cluster) Dir() string { return c.dir }

// LogDir holds one <component>.log per process.
func (c *Cluster) LogDir() string { return filepath.Join(c.dir, "logs") }

// BinDir is where the component binaries (kubectl, ctr, ...) are.
func (c *Cluster) BinDir() string { return c.binDir }

// APIServerURL is https://<APIServerIP>:<port>.
func (c *Cluster) APIServerURL() string {
	return fmt.Sprintf("https://%s:%d", c.APIServerIP(), c.ports.apiserver)
}

// APIServerIP is the address the API server binds and advertises:
// 127.0.0.1, or with NodeNetns the root end of the node's veth pair.
func (c *Cluster) APIServerIP() string {
	if c.net != nil {
		return c.net.rootIP()
	}
	return "127.0.0.1"
}

// NodeIP is the address hostlet nodes register and serve on: 127.0.0.1, or
// with NodeNetns the node's end of the veth pair.
func (c *Cluster) NodeIP() string {
	if c.net != nil {
		return c.net.nodeIP()
	}
	return "127.0.0.1"
}

// NodeNetnsPath is the node's network namespace (for nsenter --net), empty
// without NodeNetns.
func (c *Cluster) NodeNetnsPath() string {
	if c.net != nil {
		return c.net.path()
	}
	return ""
}

// CACertFile is the cluster CA (PEM); it signs every cert the harness makes.
func (c *Cluster) CACertFile() string { return c.pki.CACert }

// KubeconfigPath is the admin (system:masters) kubeconfig.
func (c *Cluster) KubeconfigPath() string { return c.adminKubeconfig }

// RESTConfig returns a copy of the admin client config (for exec,
// port-forward, dynamic clients).
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// ControlPlane are the control plane's components (their Pid names), in
// the order Stop stops them.
var ControlPlane = []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"}

// Pid is the process id of a control-plane component ("kube-apiserver",
// "etcd", ...), 0 if none runs: tests freeze it with SIGSTOP to simulate an
// outage.
func (c *Cluster) Pid(component string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[component]; p != nil && !p.exited() {
		return p.pid()
	}
	return 0
}

// Stop stops hostlets, then containerd (and everything it left: containers,
// shims, mounts, netns files, the bridge), then the control plane, and
// removes the dir unless KeepDir. Safe to call more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(c.stop)
}

func (c *Cluster) stop() {
	t0 := time.Now()
	c.mu.Lock()
	hostlets := make([]*Hostlet, 0, len(c.hostlets))
	for _, h := range c.hostlets {
		hostlets = append(hostlets, h)
	}
	procs := c.procs
	c.mu.Unlock()

	var wg sync.WaitGroup
	for _, h := range hostlets {
		wg.Add(1)
		go func() { defer wg.Done(); h.Stop() }()
	}
	wg.Wait()
	tHostlets := time.Now()

	// Containers first through the API (clean shim exits), then the daemon.
	c.removeAllTasks(context.Background())
	if c.ctrd != nil {
		c.ctrd.Close()
	}
	procs["containerd"].stop(10 * time.Second)
	if c.inst != nil {
		// Shims, containers, mounts, bridge. The control plane also names
		// the dir on its command line: spare it, it is stopped gracefully next.
		spare := map[int]bool{}
		for _, name := range ControlPlane {
			if p := procs[name]; p != nil {
				spare[p.pid()] = true
			}
		}
		cleanupLeftovers(c.cleanupSpec(false, spare), c.logf)
	}
	tContainerd := time.Now()
	for _, name := range ControlPlane {
		if name == "kube-apiserver" {
			// Its graceful shutdown takes a second (draining, endpoint
			// lease cleanup) and buys nothing: etcd, stopped gracefully
			// after it, keeps the data consistent.
			procs[name].kill()
			continue
		}
		procs[name].stop(10 * time.Second)
	}
	c.logf("harness: stopped hostlets in %v, containerd in %v, control plane in %v",
		tHostlets.Sub(t0).Round(time.Millisecond), tContainerd.Sub(tHostlets).Round(time.Millisecond),
		time.Since(tContainerd).Round(time.Millisecond))
	if c.inst != nil {
		// Sweep again now that nothing is spared, and remove the files.
		cleanupLeftovers(c.cleanupSpec(!c.inst.KeepDir, nil), c.logf)
		c.inst.release()
	}
}

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/pkg/netns"
	cnins "github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/renameio/v2"
	log "github.com/sirupsen/logrus"
)

// SandboxConfig is what a pod's shared environment is made from.
type SandboxConfig struct {
	UID, Namespace, Name string
	HostNetwork          bool
	HostIPC, HostPID     bool
	// ShareProcessNamespace puts all containers into one PID namespace.
	ShareProcessNamespace bool
	// Hostname and, when set, the FQDN written to /etc/hosts for the pod IP.
	Hostname, FQDN string
	HostAliases    []HostAlias
	// ResolvConf is the full /etc/resolv.conf content for the pod.
	ResolvConf string
	// UserNS, when set, gives the pod its own user namespace with this
	// mapping (hostUsers: false).
	UserNS *IDMap
	// PortMappings are the pod's hostPorts, served by the network's portmap
	// plugin (none for a host-network pod: its ports are the host's).
	PortMappings []PortMapping
	// CgroupParent is the pod's cgroup (EnsurePodCgroup); empty:
	// containerd's default place.
	CgroupParent string
	// Handler is the runtime handler of the pod's RuntimeClass
	// (DefaultHandler: none); it must be one hostlet runs pods with.
	Handler string
}

type HostAlias struct {
	IP        string
	Hostnames []string
}

// Sandbox is a pod's namespaces and the files its containers share. There is
// no pause process: the network, IPC and UTS namespaces are pinned by bind
// mounts, and /dev/shm is a tmpfs of the pod.
type Sandbox struct {
	UID         string   `json:"uid"`
	Namespace   string   `json:"namespace"`
	Name        string   `json:"name"`
	NetNSPath   string   `json:"netns,omitempty"`
	IPCNSPath   string   `json:"ipcns,omitempty"`
	UTSNSPath   string   `json:"utsns,omitempty"`
	IPs         []string `json:"ips"`
	HostNetwork bool     `json:"hostNetwork,omitempty"`
	HostIPC     bool     `json:"hostIPC,omitempty"`
	HostPID     bool     `json:"hostPID,omitempty"`
	// PausePID holds the shared PID namespace of a shareProcessNamespace pod.
	PausePID int `json:"pausePID,omitempty"`
	// UserNSPath pins the pod's user namespace, which owns its other
	// namespaces; IDMap is its mapping.
	UserNSPath string `json:"userns,omitempty"`
	IDMap      *IDMap `json:"idmap,omitempty"`
	// NetworkConf is the CNI config list the pod was attached with: its
	// teardown uses it even after the config directory changed.
	NetworkConf json.RawMessage `json:"networkConf,omitempty"`
	// PortMappings are the ones ADD had: DEL removes their rules with
	// them, also after a restart of hostlet.
	PortMappings []PortMapping `json:"portMappings,omitempty"`
	// CgroupParent is the pod's cgroup its containers go below.
	CgroupParent string `json:"cgroupParent,omitempty"`
	// Handler is the runtime handler every container of the pod runs
	// with, for the sandbox's whole life (a restarted hostlet reads it
	// here); none on sandboxes of older hostlets: the default one.
	Handler string `json:"handler,omitempty"`
	// Incomplete marks the record saved before the CNI ADD (so a crash
	// after it still lets the teardown run DEL): the sandbox is whole only
	// once the last save clears it.
	Incomplete bool   `json:"incomplete,omitempty"`
	Dir        string `json:"-"`
}

// ErrSandboxNotReady is the error of a pod's sandbox that exists but is not
// whole (a crash in its making, a namespace or file lost since): as the
// kubelet does with a sandbox that is not ready, it is torn down and made
// again, its containers with it.
var ErrSandboxNotReady = errors.New("pod sandbox is not ready")

func (s *Sandbox) HostsPath() string      { return filepath.Join(s.Dir, "etc-hosts") }
func (s *Sandbox) ResolvConfPath() string { return filepath.Join(s.Dir, "resolv.conf") }
func (s *Sandbox) HostnamePath() string   { return filepath.Join(s.Dir, "etc-hostname") }
func (s *Sandbox) ShmPath() string        { return filepath.Join(s.Dir, "shm") }
func (s *Sandbox) stateFile() string      { return filepath.Join(s.Dir, "sandbox.json") }

func (r *Runtime) podDir(uid string) string { return filepath.Join(r.rootDir, "pods", uid) }

// Sandbox returns the pod's sandbox if it exists and is whole: made to the
// end, its namespaces pinned, its IPs (unless on the host network), its
// shared files and /dev/shm there. One that exists but is not whole is
// ErrSandboxNotReady; none at all, fs.ErrNotExist.
func (r *Runtime) Sandbox(uid string) (*Sandbox, error) {
	dir := r.podDir(uid)
	b, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err != nil {
		return nil, err
	}
	s := &Sandbox{Dir: dir}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("sandbox state of pod %s: %v: %w", uid, err, ErrSandboxNotReady)
	}
	if why := s.notWhole(); why != "" {
		return nil, fmt.Errorf("sandbox of pod %s: %s: %w", uid, why, ErrSandboxNotReady)
	}
	return s, nil
}

// notWhole says what the sandbox lacks, empty if nothing. Each check is a
// stat or two: it runs at every sync of the pod.
func (s *Sandbox) notWhole() string {
	if s.Incomplete {
		return "its making was interrupted"
	}
	if !s.HostNetwork {
		if closed, err := netns.LoadNetNS(s.NetNSPath).Closed(); err != nil || closed {
			return "its network namespace is gone"
		}
		if len(s.IPs) == 0 {
			return "it has no IP"
		}
	}
	for _, p := range []string{s.IPCNSPath, s.UTSNSPath, s.UserNSPath} {
		if p != "" && !nsPinned(p) {
			return "namespace " + p + " is gone"
		}
	}
	if s.PausePID != 0 && !pauseAlive(s.PausePID, s.Dir) {
		return "its PID namespace is gone"
	}
	for _, p := range []string{s.HostsPath(), s.ResolvConfPath(), s.HostnamePath()} {
		if _, err := os.Stat(p); err != nil {
			return filepath.Base(p) + " is missing"
		}
	}
	if !s.HostIPC && !isMountPoint(s.ShmPath()) {
		return "its /dev/shm is not mounted"
	}
	return ""
}

// EnsureSandbox returns the pod's sandbox, creating the network namespace,
// CNI attachment and shared files when they do not exist yet.
func (r *Runtime) EnsureSandbox(ctx context.Context, cfg SandboxConfig) (*Sandbox, error) {
	if s, err := r.Sandbox(cfg.UID); err == nil {
		return s, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		log.WithError(err).WithField("pod", cfg.Namespace+"/"+cfg.Name).Info("pod sandbox not ready; making it again")
	}
	// An unknown handler fails the sandbox as containerd's CRI fails
	// RunPodSandbox, before anything of the pod is made.
	if _, err := r.RuntimeHandler(ctx, cfg.Handler); err != nil {
		return nil, fmt.Errorf("unable to get OCI runtime for sandbox %q: %w", cfg.UID, err)
	}
	s := &Sandbox{UID: cfg.UID, Namespace: cfg.Namespace, Name: cfg.Name,
		HostNetwork: cfg.HostNetwork, HostIPC: cfg.HostIPC, HostPID: cfg.HostPID, Dir: r.podDir(cfg.UID),
		CgroupParent: cfg.CgroupParent, Handler: cfg.Handler}
	// A half-made sandbox from before (crash, lost netns) is torn down first so
	// its IP allocation is not leaked.
	_ = r.RemoveSandbox(ctx, cfg.UID)
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return nil, err
	}
	if cfg.UserNS != nil && (cfg.HostNetwork || cfg.HostIPC || cfg.HostPID) {
		return nil, fmt.Errorf("a pod in a user namespace cannot share the host's namespaces")
	}
	if cfg.HostNetwork {
		s.IPs = []string{r.nodeIP}
	} else {
		conf, err := r.network.Conf()
		if err != nil {
			return nil, err
		}
		s.NetworkConf, s.PortMappings = conf, cfg.PortMappings
		if cfg.UserNS != nil {
			if err := r.pinUserNS(s, cfg); err != nil {
				_ = r.RemoveSandbox(ctx, cfg.UID)
				return nil, err
			}
		} else {
			ns, err := netns.NewNetNS(filepath.Join(r.rootDir, "netns"))
			if err != nil {
				return nil, fmt.Errorf("creating network namespace: %w", err)
			}
			s.NetNSPath = ns.GetPath()
		}
		// Persist before CNI ADD so a crash in between still lets cleanup run
		// DEL, with this config; marked incomplete until the end.
		s.Incomplete = true
		if err := s.save(); err != nil {
			return nil, err
		}
		ips, err := r.network.Attach(ctx, conf, cfg.UID, s.NetNSPath, s.args())
		if err != nil {
			_ = r.RemoveSandbox(ctx, cfg.UID)
			return nil, err
		}
		for _, ip := range ips {
			s.IPs = append(s.IPs, ip.String())
		}
	}
	if err := r.pinSandboxNamespaces(s, cfg); err != nil {
		_ = r.RemoveSandbox(ctx, cfg.UID)
		return nil, err
	}
	if err := writeSandboxFiles(s, cfg); err != nil {
		_ = r.RemoveSandbox(ctx, cfg.UID)
		return nil, err
	}
	s.Incomplete = false
	if err := s.save(); err != nil {
		return nil, err
	}
	r.sandboxEvent(cfg.UID, ContainerCreated)
	r.sandboxEvent(cfg.UID, ContainerStarted)
	return s, nil
}

// pinSandboxNamespaces gives the pod the IPC and UTS namespaces (and
// /dev/shm) its containers share; a host-network pod keeps the host's UTS,
// a hostIPC pod the host's IPC.
func (r *Runtime) pinSandboxNamespaces(s *Sandbox, cfg SandboxConfig) error {
	if !cfg.HostIPC {
		if err := mountShm(s.ShmPath()); err != nil {
			return fmt.Errorf("mounting /dev/shm of the pod: %w", err)
		}
	}
	if s.UserNSPath != "" {
		// pinUserNS made them all, owned by the pod's user namespace.
		return nil
	}
	if cfg.ShareProcessNamespace && !cfg.HostPID {
		pid, err := r.startPause(s.Dir)
		if err != nil {
			return err
		}
		s.PausePID = pid
		if err := r.cgroups.PlaceSandbox(cfg.CgroupParent, cfg.UID, pid); err != nil {
			log.WithError(err).WithField("pod", cfg.Namespace+"/"+cfg.Name).Warn("the pod's PID namespace holder stays outside the pod's cgroup")
		}
	}
	if cfg.HostNetwork && cfg.HostIPC {
		return nil
	}
	// Pin both, then drop what the pod takes from the host, so one locked
	// thread does all the work.
	ipc, uts, err := pinIPCUTS(s.Dir, cfg.Hostname)
	if err != nil {
		stopPause(s.PausePID, s.Dir)
		return err
	}
	s.IPCNSPath, s.UTSNSPath = ipc, uts
	if cfg.HostIPC {
		unpinNamespace(ipc)
		s.IPCNSPath = ""
	}
	if cfg.HostNetwork {
		unpinNamespace(uts)
		s.UTSNSPath = ""
	}
	return nil
}

func (s *Sandbox) args() PodNetworkArgs {
	return PodNetworkArgs{Namespace: s.Namespace, Name: s.Name, UID: s.UID, PortMappings: s.PortMappings}
}

func (s *Sandbox) save() error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return writeFileAtomic(s.stateFile(), b, 0o640)
}

// RemoveSandbox releases the pod's network (CNI DEL), its namespace and its
// shared files. It is idempotent.
func (r *Runtime) RemoveSandbox(ctx context.Context, uid string) error {
	dir := r.podDir(uid)
	s := &Sandbox{Dir: dir}
	// The pinned namespaces and /dev/shm sit at fixed places in the pod dir:
	// released even when a crash left no state file behind.
	unpinNamespace(filepath.Join(dir, "ipc"))
	unpinNamespace(filepath.Join(dir, "uts"))
	unpinNamespace(filepath.Join(dir, "user"))
	unmountShm(s.ShmPath())
	b, err := os.ReadFile(s.stateFile())
	if err != nil {
		return nil
	}
	if json.Unmarshal(b, s) != nil {
		return os.Remove(s.stateFile())
	}
	stopPause(s.PausePID, dir)
	if s.NetNSPath != "" {
		if err := r.network.Detach(ctx, s.NetworkConf, uid, s.NetNSPath, s.args()); err != nil {
			log.WithError(err).WithField("pod", s.Namespace+"/"+s.Name).Warn("CNI DEL failed")
		}
		if err := netns.LoadNetNS(s.NetNSPath).Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing network namespace: %w", err)
		}
	}
	if err := os.Remove(s.stateFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !s.Incomplete {
		r.sandboxEvent(uid, ContainerStopped)
	}
	return nil
}

// writeSandboxFiles writes /etc/hosts, /etc/resolv.conf and /etc/hostname as
// the kubelet manages them.
func writeSandboxFiles(s *Sandbox, cfg SandboxConfig) error {
	var hosts string
	if cfg.HostNetwork {
		host, err := os.ReadFile("/etc/hosts")
		if err != nil {
			return err
		}
		hosts = "# Kubernetes-managed hosts file (host network).\n" + string(host)
	} else {
		var b strings.Builder
		b.WriteString("# Kubernetes-managed hosts file.\n")
		b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		for _, ip := range s.IPs {
			if cfg.FQDN != "" {
				// The short name, also when the hostname is the FQDN.
				short, _, _ := strings.Cut(cfg.FQDN, ".")
				fmt.Fprintf(&b, "%s\t%s\t%s\n", ip, cfg.FQDN, short)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, cfg.Hostname)
			}
		}
		hosts = b.String()
	}
	if len(cfg.HostAliases) > 0 {
		var b strings.Builder
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range cfg.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
		hosts += b.String()
	}
	if err := writeFileAtomic(s.HostsPath(), []byte(hosts), 0o644); err != nil {
		return err
	}
	if err := writeFileAtomic(s.ResolvConfPath(), []byte(cfg.ResolvConf), 0o644); err != nil {
		return err
	}
	hostname := cfg.Hostname
	if cfg.HostNetwork {
		// A host-network pod has the node's UTS namespace and name.
		if hn, err := os.Hostname(); err == nil {
			hostname = hn
		}
	}
	return writeFileAtomic(s.HostnamePath(), []byte(hostname+"\n"), 0o644)
}

// writeFileAtomic replaces path whole, so a container starting meanwhile
// never bind-mounts half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	return renameio.WriteFile(path, data, mode, renameio.WithTempDir(filepath.Dir(path)))
}

// ParseIPs is a helper for callers that need net.IP values of a sandbox.
func (s *Sandbox) ParseIPs() []net.IP {
	var out []net.IP
	for _, ip := range s.IPs {
		if p := net.ParseIP(ip); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// DialPod opens a TCP connection to port inside the pod's network namespace,
// so that servers bound to the pod's localhost are reached too, as with the
// kubelet's port forwarding.
func (r *Runtime) DialPod(ctx context.Context, uid string, port int32) (net.Conn, error) {
	s, err := r.Sandbox(uid)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	var d net.Dialer
	if s.HostNetwork {
		return d.DialContext(ctx, "tcp", addr)
	}
	var conn net.Conn
	err = netns.LoadNetNS(s.NetNSPath).Do(func(cnins.NetNS) error {
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

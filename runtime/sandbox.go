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
	"strings"

	"github.com/containerd/containerd/v2/pkg/netns"
	log "github.com/sirupsen/logrus"
)

// SandboxConfig is what a pod's shared environment is made from.
type SandboxConfig struct {
	UID, Namespace, Name string
	HostNetwork          bool
	// Hostname and, when set, the FQDN written to /etc/hosts for the pod IP.
	Hostname, FQDN string
	HostAliases    []HostAlias
	// ResolvConf is the full /etc/resolv.conf content for the pod.
	ResolvConf string
}

type HostAlias struct {
	IP        string
	Hostnames []string
}

// Sandbox is a pod's network namespace and the files its containers share.
// There is no pause process: a pinned network namespace is enough.
type Sandbox struct {
	UID         string   `json:"uid"`
	Namespace   string   `json:"namespace"`
	Name        string   `json:"name"`
	NetNSPath   string   `json:"netns,omitempty"`
	IPs         []string `json:"ips"`
	HostNetwork bool     `json:"hostNetwork,omitempty"`
	Dir         string   `json:"-"`
}

func (s *Sandbox) HostsPath() string      { return filepath.Join(s.Dir, "etc-hosts") }
func (s *Sandbox) ResolvConfPath() string { return filepath.Join(s.Dir, "resolv.conf") }
func (s *Sandbox) HostnamePath() string   { return filepath.Join(s.Dir, "etc-hostname") }
func (s *Sandbox) stateFile() string      { return filepath.Join(s.Dir, "sandbox.json") }

func (r *Runtime) podDir(uid string) string { return filepath.Join(r.rootDir, "pods", uid) }

// Sandbox returns the pod's sandbox if it exists and its namespace is intact.
func (r *Runtime) Sandbox(uid string) (*Sandbox, error) {
	dir := r.podDir(uid)
	b, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err != nil {
		return nil, err
	}
	s := &Sandbox{Dir: dir}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, err
	}
	if !s.HostNetwork {
		if closed, err := netns.LoadNetNS(s.NetNSPath).Closed(); err != nil || closed {
			return nil, fmt.Errorf("network namespace of pod %s is gone: %w", uid, fs.ErrNotExist)
		}
	}
	return s, nil
}

// EnsureSandbox returns the pod's sandbox, creating the network namespace,
// CNI attachment and shared files when they do not exist yet.
func (r *Runtime) EnsureSandbox(ctx context.Context, cfg SandboxConfig) (*Sandbox, error) {
	if s, err := r.Sandbox(cfg.UID); err == nil {
		return s, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		log.WithError(err).WithField("pod", cfg.Namespace+"/"+cfg.Name).Warn("discarding unreadable sandbox state")
	}
	s := &Sandbox{UID: cfg.UID, Namespace: cfg.Namespace, Name: cfg.Name, HostNetwork: cfg.HostNetwork, Dir: r.podDir(cfg.UID)}
	// A half-made sandbox from before (crash, lost netns) is torn down first so
	// its IP allocation is not leaked.
	_ = r.RemoveSandbox(ctx, cfg.UID)
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return nil, err
	}
	if cfg.HostNetwork {
		s.IPs = []string{r.nodeIP}
	} else {
		ns, err := netns.NewNetNS(filepath.Join(r.rootDir, "netns"))
		if err != nil {
			return nil, fmt.Errorf("creating network namespace: %w", err)
		}
		s.NetNSPath = ns.GetPath()
		// Persist before CNI ADD so a crash in between still lets cleanup run DEL.
		if err := s.save(); err != nil {
			return nil, err
		}
		ips, err := r.network.Attach(ctx, cfg.UID, s.NetNSPath, s.args())
		if err != nil {
			_ = r.RemoveSandbox(ctx, cfg.UID)
			return nil, err
		}
		for _, ip := range ips {
			s.IPs = append(s.IPs, ip.String())
		}
	}
	if err := writeSandboxFiles(s, cfg); err != nil {
		_ = r.RemoveSandbox(ctx, cfg.UID)
		return nil, err
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Sandbox) args() PodNetworkArgs {
	return PodNetworkArgs{Namespace: s.Namespace, Name: s.Name, UID: s.UID}
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
	b, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err == nil {
		s := &Sandbox{Dir: dir}
		if json.Unmarshal(b, s) == nil && s.NetNSPath != "" {
			if err := r.network.Detach(ctx, uid, s.NetNSPath, s.args()); err != nil {
				log.WithError(err).WithField("pod", s.Namespace+"/"+s.Name).Warn("CNI DEL failed")
			}
			if err := netns.LoadNetNS(s.NetNSPath).Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing network namespace: %w", err)
			}
		}
		if err := os.Remove(filepath.Join(dir, "sandbox.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
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
				fmt.Fprintf(&b, "%s\t%s\t%s\n", ip, cfg.FQDN, cfg.Hostname)
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
	return writeFileAtomic(s.HostnamePath(), []byte(cfg.Hostname+"\n"), 0o644)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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

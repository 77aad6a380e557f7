package join

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containernetworking/cni/libcni"
	log "github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/version"
)

// PreflightConfig says where the host's runtime and network plugins are.
type PreflightConfig struct {
	RuntimeEndpoint string // unix:///run/containerd/containerd.sock
	CNIConfDir      string
	CNIBinDirs      []string
	// ImageSnapshotter, if set ("stargz"), must be containerd's proxy
	// snapshotter (lazy pulls).
	ImageSnapshotter string
	// Ignore turns the named checks' errors into warnings ("all": every
	// check), like kubeadm's --ignore-preflight-errors.
	Ignore map[string]bool
}

// minContainerd is the oldest containerd hostlet's client and CRI-like
// features (user namespaces, image volumes) are known to work with.
var minContainerd = version.MustParseGeneric("1.7.0")

// check is one preflight check; err says what is wrong and how to fix it.
type check struct {
	name string
	run  func(context.Context, PreflightConfig) (warning string, err error)
}

var checks = []check{
	{"IsPrivilegedUser", checkRoot},
	{"KubeletNotRunning", checkNoKubelet},
	{"ContainerRuntime", checkContainerd},
	{"StargzSnapshotter", checkStargz},
	{"CNI", checkCNI},
	{"Cgroups", checkCgroups},
	{"Swap", checkSwap},
	{"IPForward", checkSysctl("/proc/sys/net/ipv4/ip_forward", "sysctl -w net.ipv4.ip_forward=1")},
	{"BridgeNetfilter", checkSysctl("/proc/sys/net/bridge/bridge-nf-call-iptables", "modprobe br_netfilter && sysctl -w net.bridge.bridge-nf-call-iptables=1")},
}

// CheckNames lists the checks --ignore-preflight-errors can name, in the
// order they run, so the flag's help cannot drift from them.
func CheckNames() []string {
	names := make([]string, 0, len(checks))
	for _, c := range checks {
		names = append(names, c.name)
	}
	return names
}

// Preflight runs every check and returns all failures at once, so one run
// shows everything to fix.
func Preflight(ctx context.Context, cfg PreflightConfig) error {
	var failed []string
	for _, c := range checks {
		warning, err := c.run(ctx, cfg)
		if warning != "" {
			log.Warnf("preflight [%s]: %s", c.name, warning)
		}
		if err == nil {
			continue
		}
		if cfg.Ignore[c.name] || cfg.Ignore["all"] {
			log.Warnf("preflight [%s] (ignored): %v", c.name, err)
			continue
		}
		failed = append(failed, fmt.Sprintf("[%s] %v", c.name, err))
	}
	if len(failed) > 0 {
		return fmt.Errorf("preflight checks failed (skip one with --ignore-preflight-errors=<name>):\n\t%s", strings.Join(failed, "\n\t"))
	}
	return nil
}

func checkRoot(context.Context, PreflightConfig) (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("hostlet join must run as root (it writes the node's credentials and runs containers)")
	}
	return "", nil
}

// checkNoKubelet refuses a host a kubelet runs on: hostlet takes the
// kubelet's place (its root dir, port and plugin sockets by default), and
// two node agents would fight over the same containers and sockets.
func checkNoKubelet(context.Context, PreflightConfig) (string, error) {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range comms {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == "kubelet" {
			return "", fmt.Errorf("a kubelet runs on this host (pid %s): stop it (systemctl disable --now kubelet) before hostlet takes its place", filepath.Base(filepath.Dir(f)))
		}
	}
	return "", nil
}

func checkContainerd(ctx context.Context, cfg PreflightConfig) (string, error) {
	addr := strings.TrimPrefix(cfg.RuntimeEndpoint, "unix://")
	if _, err := os.Stat(addr); err != nil {
		return "", fmt.Errorf("containerd socket %s: %w (install and start containerd, or set --container-runtime-endpoint)", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err := containerd.New(addr, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return "", fmt.Errorf("containerd at %s does not answer: %w", addr, err)
	}
	defer client.Close()
	v, err := client.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("containerd at %s does not answer: %w", addr, err)
	}
	got, err := version.ParseGeneric(v.Version)
	if err != nil {
		return fmt.Sprintf("cannot read containerd's version %q", v.Version), nil
	}
	if got.LessThan(minContainerd) {
		return "", fmt.Errorf("containerd %s is too old: hostlet needs %s or later (Debian 12's own is 1.6: install containerd.io from Docker's apt repository or containerd's release binaries)", v.Version, minContainerd)
	}
	return "", nil
}

// checkCNI wants every plugin the host's network config names in a plugin
// directory. No config yet is only a warning: a cluster's CNI DaemonSet
// (flannel, Calico, Cilium) writes it once the node has joined, and the node
// reports NetworkReady=false until then, as the kubelet's does.
func checkCNI(_ context.Context, cfg PreflightConfig) (string, error) {
	files, err := libcni.ConfFiles(cfg.CNIConfDir, []string{".conf", ".conflist", ".json"})
	if err != nil || len(files) == 0 {
		return fmt.Sprintf("no CNI network config in %s yet: the node stays NotReady until the cluster's CNI DaemonSet or you install one (or set --cni-conf-dir)", cfg.CNIConfDir), nil
	}
	var list *libcni.NetworkConfigList
	if strings.HasSuffix(files[0], ".conflist") {
		list, err = libcni.ConfListFromFile(files[0])
	} else {
		var c *libcni.PluginConfig
		if c, err = libcni.ConfFromFile(files[0]); err == nil {
			list, err = libcni.ConfListFromConf(c)
		}
	}
	if err != nil {
		return "", fmt.Errorf("CNI config %s: %w", files[0], err)
	}
	// No loopback: hostlet brings lo up itself.
	var need []string
	for _, p := range list.Plugins {
		need = append(need, p.Network.Type)
	}
	var missing []string
	for _, plugin := range need {
		found := false
		for _, dir := range cfg.CNIBinDirs {
			if st, err := os.Stat(filepath.Join(dir, plugin)); err == nil && st.Mode()&0o111 != 0 {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, plugin)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("CNI plugins %v (used by %s) not found in %v (Debian: apt-get install containernetworking-plugins)", missing, files[0], cfg.CNIBinDirs)
	}
	return "", nil
}

// checkCgroups accepts both versions; hostlet places containers with the
// cgroupfs driver (cgroup paths it names itself), as containerd's default.
func checkCgroups(context.Context, PreflightConfig) (string, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "", nil
	case cgroups.Legacy, cgroups.Hybrid:
		return "cgroup v1 is deprecated in Kubernetes 1.35: move the host to cgroup v2 (systemd.unified_cgroup_hierarchy=1)", nil
	}
	return "", errors.New("no cgroup filesystem mounted at /sys/fs/cgroup")
}

// checkSwap fails with swap on, as the kubelet's failSwapOn does: memory
// limits and eviction assume none.
func checkSwap(context.Context, PreflightConfig) (string, error) {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		return "", nil
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 1 {
		return "", fmt.Errorf("swap is on (%s): turn it off with swapoff -a and remove it from /etc/fstab", strings.Fields(lines[1])[0])
	}
	return "", nil
}

func checkSysctl(path, fix string) func(context.Context, PreflightConfig) (string, error) {
	return func(context.Context, PreflightConfig) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			return "", fmt.Errorf("%s is not 1: pods' traffic would not be forwarded or filtered (%s)", path, fix)
		}
		return "", nil
	}
}

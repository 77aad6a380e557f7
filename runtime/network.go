package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	log "github.com/sirupsen/logrus"
)

// ErrCNINotInitialized is containerd's CRI status while no pod network is
// loaded (go-cni's error); the kubelet shows it in the node's Ready message.
var ErrCNINotInitialized = errors.New("cni plugin not initialized")

// Network attaches pod network namespaces through CNI. The config is loaded
// when the config directory changes (see Watch) and when the node's pod CIDRs
// do, as containerd's CRI does, so a config a CNI DaemonSet writes later is
// picked up without a restart.
type Network struct {
	confDir  string
	binDirs  []string
	cacheDir string
	// bridge, if set, names the default network's bridge: used while the
	// config directory holds no config, once the node has pod CIDRs.
	bridge string
	cni    *libcni.CNIConfig
	// inproc runs the default network's bridge and host-local plugins in
	// this process (inprocExec); used only for that config (isDefaultConf).
	inproc *libcni.CNIConfig

	mu       sync.Mutex
	list     *libcni.NetworkConfigList // nil: no network loaded
	source   string                    // the file list came from, or "" for the default network
	podCIDRs []string
	onChange func()
	watching bool   // Watch runs: it reloads on changes
	loadErr  string // the last load's error, logged once
}

// PodNetworkArgs identify the pod to CNI plugins (CNI_ARGS as the kubelet
// passes them) and carry its host ports.
type PodNetworkArgs struct {
	Namespace, Name, UID string
	// PortMappings go to plugins with the portMappings capability (portmap)
	// on ADD and DEL, as containerd's CRI passes them.
	PortMappings []PortMapping
}

// PortMapping is one hostPort of the pod, in the CNI portMappings
// capability's shape.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // tcp, udp or sctp (lower case, as CNI wants)
	HostIP        string `json:"hostIP,omitempty"`
}

// NewNetwork loads the first config in confDir. bridge, if not empty, turns on
// the default network over the node's pod CIDRs (SetPodCIDRs) for when confDir
// holds none.
func NewNetwork(confDir string, binDirs []string, cacheDir, bridge string) (*Network, error) {
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	n := &Network{
		confDir:  confDir,
		binDirs:  binDirs,
		cacheDir: cacheDir,
		bridge:   bridge,
		cni:      libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, exec),
		inproc:   libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, newInprocExec(exec)),
	}
	n.reload("start")
	return n, nil
}

// SetPodCIDRs takes the node's spec.podCIDRs (the kubelet's UpdatePodCIDR);
// the default network, if on, is built from them.
func (n *Network) SetPodCIDRs(cidrs []string) {
	n.mu.Lock()
	same := slices.Equal(n.podCIDRs, cidrs)
	n.podCIDRs = slices.Clone(cidrs)
	n.mu.Unlock()
	if !same {
		log.WithField("podCIDRs", cidrs).Info("CNI: node pod CIDRs")
		n.reload("pod CIDRs")
	}
}

// reload loads the network config and tells the subscriber when it changed.
func (n *Network) reload(why string) {
	list, source, err := n.load()
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	n.mu.Lock()
	changed := !sameList(n.list, list) || n.source != source
	newErr := errText != n.loadErr
	n.list, n.source, n.loadErr = list, source, errText
	notify := n.onChange
	n.mu.Unlock()
	entry := log.WithFields(log.Fields{"dir": n.confDir, "trigger": why})
	switch {
	case err != nil && newErr:
		// As containerd: the network is not initialized until a config loads.
		entry.WithError(err).Warn("CNI: no network config loaded")
	case changed && list != nil:
		entry.WithFields(log.Fields{"network": list.Name, "file": source}).Info("CNI: network config loaded")
	}
	if changed && notify != nil {
		notify()
	}
}

func sameList(a, b *libcni.NetworkConfigList) bool {
	if a == nil || b == nil {
		return a == b
	}
	return string(a.Bytes) == string(b.Bytes)
}

// load reads the first network config in lexical order, the rule the
// kubelet's dockershim and containerd's CRI both follow; with none, the
// default network if it is on and the node has pod CIDRs.
func (n *Network) load() (*libcni.NetworkConfigList, string, error) {
	files, err := libcni.ConfFiles(n.confDir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return nil, "", fmt.Errorf("reading CNI config dir %s: %w", n.confDir, err)
	}
	if len(files) == 0 {
		n.mu.Lock()
		cidrs := n.podCIDRs
		n.mu.Unlock()
		if n.bridge == "" || len(cidrs) == 0 {
			return nil, "", fmt.Errorf("no network config found in %s", n.confDir)
		}
		b, err := BridgeConfList(n.bridge, cidrs, filepath.Join(n.cacheDir, "networks"))
		if err != nil {
			return nil, "", err
		}
		list, err := libcni.ConfListFromBytes(b)
		return list, "", err
	}
	sort.Strings(files)
	f := files[0]
	var list *libcni.NetworkConfigList
	if filepath.Ext(f) == ".conflist" {
		list, err = libcni.ConfListFromFile(f)
	} else {
		var conf *libcni.NetworkConfig
		if conf, err = libcni.ConfFromFile(f); err == nil {
			list, err = libcni.ConfListFromConf(conf)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("invalid CNI config %s: %w", f, err)
	}
	if len(list.Plugins) == 0 {
		return nil, "", fmt.Errorf("CNI config list %s has no plugins", f)
	}
	return list, f, nil
}

// config is the loaded network.
func (n *Network) config() (*libcni.NetworkConfigList, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.list == nil {
		return nil, ErrCNINotInitialized
	}
	return n.list, nil
}

// Status reports why pods cannot get a network, or nil when they can: a
// loaded config whose plugins are all installed.
func (n *Network) Status() error {
	n.mu.Lock()
	watching := n.watching
	n.mu.Unlock()
	if !watching {
		n.reload("status check")
	}
	list, err := n.config()
	if err != nil {
		return err
	}
	for _, p := range list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, n.binDirs); err != nil {
			return fmt.Errorf("CNI plugin %q of network %q not found in %v", p.Network.Type, list.Name, n.binDirs)
		}
	}
	return nil
}

func (n *Network) runtimeConf(id, netnsPath string, a PodNetworkArgs) *libcni.RuntimeConf {
	var caps map[string]any
	if len(a.PortMappings) > 0 {
		// libcni hands it only to plugins that declare the capability.
		caps = map[string]any{"portMappings": a.PortMappings}
	}
	return &libcni.RuntimeConf{
		CapabilityArgs: caps,
		ContainerID:    id,
		NetNS:          netnsPath,
		IfName:         "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", a.Namespace},
			{"K8S_POD_NAME", a.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", a.UID},
		},
	}
}

// Conf is the loaded network's config list, as a sandbox records it: DEL
// must get the config ADD had (the CNI spec's rule), whatever the config
// directory holds by then, or host-local keeps the pod's address forever.
func (n *Network) Conf() ([]byte, error) {
	list, err := n.config()
	if err != nil {
		return nil, err
	}
	return list.Bytes, nil
}

// listFor parses a recorded config; with none (a sandbox made before
// configs were recorded), the loaded one.
func (n *Network) listFor(conf []byte) (*libcni.NetworkConfigList, error) {
	if len(conf) == 0 {
		return n.config()
	}
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		return nil, fmt.Errorf("recorded CNI config: %w", err)
	}
	return list, nil
}

// forPod leaves out the portmap plugins of a pod without hostPorts: portmap
// only passes the previous result on when it has no mappings, on ADD and DEL
// alike, and running it costs a process start per pod each way (a tenth of
// a pod's start on a small host). A pod with mappings runs the whole list;
// which one a pod gets depends only on its recorded mappings, so its DEL runs
// the plugins its ADD ran.
func forPod(list *libcni.NetworkConfigList, a PodNetworkArgs) *libcni.NetworkConfigList {
	if len(a.PortMappings) > 0 {
		return list
	}
	plugins := make([]*libcni.NetworkConfig, 0, len(list.Plugins))
	for _, p := range list.Plugins {
		if p.Network.Type != "portmap" {
			plugins = append(plugins, p)
		}
	}
	if len(plugins) == len(list.Plugins) || len(plugins) == 0 {
		return list
	}
	trimmed := *list
	trimmed.Plugins = plugins
	return &trimmed
}

// cniFor is how a pod's network is set up and torn down: in-process for
// the default network hostlet writes itself, by the plugins' executables
// for any other config, as CNI specifies. Both leave the same state, so a
// pod attached one way is detached by the other (a hostlet of another
// version, containerd's CRI on the same config).
func (n *Network) cniFor(list *libcni.NetworkConfigList) *libcni.CNIConfig {
	if isDefaultConf(list.Bytes) {
		return n.inproc
	}
	return n.cni
}

// Attach brings lo up (loopbackUp) and runs CNI ADD for the pod network
// given by conf (see Conf), and returns the pod's IPs.
func (n *Network) Attach(ctx context.Context, conf []byte, id, netnsPath string, a PodNetworkArgs) ([]net.IP, error) {
	list, err := n.listFor(conf)
	if err != nil {
		return nil, err
	}
	if err := loopbackUp(netnsPath); err != nil {
		return nil, fmt.Errorf("setting up loopback: %w", err)
	}
	list = forPod(list, a)
	rt := n.runtimeConf(id, netnsPath, a)
	res, err := n.cniFor(list).AddNetworkList(ctx, list, rt)
	if err != nil {
		return nil, fmt.Errorf("plugin type=%q name=%q failed (add): %w", list.Plugins[len(list.Plugins)-1].Network.Type, list.Name, err)
	}
	r100, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("CNI result: %w", err)
	}
	var ips []net.IP
	for _, ip := range r100.IPs {
		// Only addresses on the pod's own interface count (bridge plugins also
		// report the host side).
		if ip.Interface != nil && *ip.Interface < len(r100.Interfaces) && r100.Interfaces[*ip.Interface].Sandbox == "" {
			continue
		}
		ips = append(ips, ip.Address.IP)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("network %q returned no IP for the pod", list.Name)
	}
	// IPv4 first, as the kubelet orders podIPs for dual-stack.
	sort.SliceStable(ips, func(i, j int) bool { return ips[i].To4() != nil && ips[j].To4() == nil })
	return ips, nil
}

// Detach runs CNI DEL with the config the pod was attached with, releasing
// its IP allocation. It is safe to repeat and works on a namespace that is
// already gone (plugins must tolerate that).
func (n *Network) Detach(ctx context.Context, conf []byte, id, netnsPath string, a PodNetworkArgs) error {
	list, err := n.listFor(conf)
	if err != nil {
		return err
	}
	list = forPod(list, a)
	rt := n.runtimeConf(id, netnsPath, a)
	if err := n.cniFor(list).DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("plugin type=%q name=%q failed (delete): %w", list.Plugins[len(list.Plugins)-1].Network.Type, list.Name, err)
	}
	// lo needs no DEL: it goes with the namespace.
	return nil
}

// CNIConfigInfo is the node's CNI state as containerd's CRI shows it in
// its verbose status (go-cni's ConfigResult): the plugin and config dirs,
// one config loaded, the interfaces' prefix, and the networks a pod is
// attached to: the loopback, then the loaded list on eth0.
type CNIConfigInfo struct {
	PluginDirs       []string
	PluginConfDir    string
	PluginMaxConfNum int
	Prefix           string
	Networks         []CNINetworkInfo
}

// CNINetworkInfo is one network a pod is attached to, and its interface.
type CNINetworkInfo struct {
	Config *CNIConfListInfo
	IFName string
}

// CNIConfListInfo is a config list: its name, version, plugins, source.
type CNIConfListInfo struct {
	Name       string
	CNIVersion string
	Plugins    []CNIPluginInfo
	Source     string
}

// CNIPluginInfo is one plugin's config and source.
type CNIPluginInfo struct {
	Network any
	Source  string
}

// cniLoopback is go-cni's loopback network, which containerd's CRI
// attaches every pod to first (hostlet brings lo up itself).
const cniLoopback = `{"cniVersion":"0.3.1","name":"cni-loopback","plugins":[{"type":"loopback"}]}`

// ConfigInfo is the CNI state as CNIConfigInfo says; no networks before a
// config is loaded.
func (n *Network) ConfigInfo() CNIConfigInfo {
	out := CNIConfigInfo{PluginDirs: slices.Clone(n.binDirs), PluginConfDir: n.confDir, PluginMaxConfNum: 1, Prefix: "eth"}
	list, err := n.config()
	if err != nil {
		return out
	}
	lo := &CNIConfListInfo{Name: "cni-loopback", CNIVersion: "0.3.1",
		Plugins: []CNIPluginInfo{{Network: map[string]string{"type": "loopback"}, Source: `{"type":"loopback"}`}}, Source: cniLoopback}
	def := &CNIConfListInfo{Name: list.Name, CNIVersion: list.CNIVersion, Source: string(list.Bytes)}
	for _, p := range list.Plugins {
		def.Plugins = append(def.Plugins, CNIPluginInfo{Network: p.Network, Source: string(p.Bytes)})
	}
	out.Networks = []CNINetworkInfo{{Config: lo, IFName: "lo"}, {Config: def, IFName: "eth0"}}
	return out
}

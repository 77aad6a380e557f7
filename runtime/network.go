package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// loopbackConf brings up lo in every pod namespace, as the kubelet's CNI
// integration always did, independent of the cluster's network config.
const loopbackConf = `{"cniVersion":"0.3.1","name":"cni-loopback","type":"loopback"}`

// Network attaches pod network namespaces through CNI. The config is re-read
// on every use so a fixed or replaced config takes effect without a restart.
type Network struct {
	confDir  string
	binDirs  []string
	cni      *libcni.CNIConfig
	loopback *libcni.NetworkConfigList
}

// PodNetworkArgs identify the pod to CNI plugins (CNI_ARGS as the kubelet passes them).
type PodNetworkArgs struct {
	Namespace, Name, UID string
}

func NewNetwork(confDir string, binDirs []string, cacheDir string) (*Network, error) {
	lo, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"0.3.1","name":"cni-loopback","plugins":[` + loopbackConf + `]}`))
	if err != nil {
		return nil, err
	}
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return &Network{
		confDir:  confDir,
		binDirs:  binDirs,
		cni:      libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, exec),
		loopback: lo,
	}, nil
}

// config loads the first network config in lexical order, the rule the
// kubelet's dockershim and containerd's CRI both follow.
func (n *Network) config() (*libcni.NetworkConfigList, error) {
	files, err := libcni.ConfFiles(n.confDir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return nil, fmt.Errorf("reading CNI config dir %s: %w", n.confDir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no networks found in %s", n.confDir)
	}
	sort.Strings(files)
	for _, f := range files {
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
			return nil, fmt.Errorf("invalid CNI config %s: %w", f, err)
		}
		if len(list.Plugins) == 0 {
			return nil, fmt.Errorf("CNI config list %s has no plugins", f)
		}
		return list, nil
	}
	return nil, errors.New("unreachable")
}

// Status reports why pods cannot get a network, or nil when they can: a
// readable config whose plugins are all installed.
func (n *Network) Status() error {
	list, err := n.config()
	if err != nil {
		return err
	}
	for _, p := range append(list.Plugins, n.loopback.Plugins...) {
		if _, err := invoke.FindInPath(p.Network.Type, n.binDirs); err != nil {
			return fmt.Errorf("CNI plugin %q of network %q not found in %v", p.Network.Type, list.Name, n.binDirs)
		}
	}
	return nil
}

func (n *Network) runtimeConf(id, netnsPath string, a PodNetworkArgs) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       netnsPath,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", a.Namespace},
			{"K8S_POD_NAME", a.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", a.UID},
		},
	}
}

// Attach runs CNI ADD for lo and the pod network and returns the pod's IPs.
func (n *Network) Attach(ctx context.Context, id, netnsPath string, a PodNetworkArgs) ([]net.IP, error) {
	list, err := n.config()
	if err != nil {
		return nil, err
	}
	rt := n.runtimeConf(id, netnsPath, a)
	loRT := *rt
	loRT.IfName = "lo"
	if _, err := n.cni.AddNetworkList(ctx, n.loopback, &loRT); err != nil {
		return nil, fmt.Errorf("setting up loopback: %w", err)
	}
	res, err := n.cni.AddNetworkList(ctx, list, rt)
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

// Detach runs CNI DEL, releasing the pod's IP allocation. It is safe to repeat
// and works on a namespace that is already gone (plugins must tolerate that).
func (n *Network) Detach(ctx context.Context, id, netnsPath string, a PodNetworkArgs) error {
	list, err := n.config()
	if err != nil {
		return err
	}
	rt := n.runtimeConf(id, netnsPath, a)
	if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("plugin type=%q name=%q failed (delete): %w", list.Plugins[len(list.Plugins)-1].Network.Type, list.Name, err)
	}
	loRT := *rt
	loRT.IfName = "lo"
	_ = n.cni.DelNetworkList(ctx, n.loopback, &loRT)
	return nil
}

package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	cnins "github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"github.com/vishvananda/netlink"
	"k8s.io/utils/clock"
)

// inprocExec is libcni's plugin executor for the default network hostlet
// writes itself (BridgeConfList): its bridge plugin, and the host-local
// IPAM the bridge plugin would exec, run in this process; every other
// plugin (portmap, for pods with hostPorts) is exec'd. Two plugin processes
// per pod start and two per teardown were most of what a burst of pods costs
// beyond containerd's own processes.
//
// libcni still drives it all, so everything outside the plugins is what it
// is for exec'd plugins: the result cached under the cache dir (a later DEL,
// also after a restart, gets it as prevResult), the chaining into portmap,
// the config recorded per sandbox. Inside, it does what the bridge and
// host-local plugins do for this config, with their own Go packages: the
// same bridge, a veth named by ip.SetupVeth ("eth0" in the pod), the same
// gateway address on the bridge, the same host-local store under dataDir (a
// file per address holding "<container id>\r\n<ifname>", the
// last_reserved_ip.<range> files, the same flock), so a pod set up here is
// torn down by the exec'd plugins and the other way round.
type inprocExec struct {
	exec  invoke.Exec // the plugins for everything not done here
	clock clock.Clock
}

func newInprocExec(exec invoke.Exec) *inprocExec {
	return &inprocExec{exec: exec, clock: clock.RealClock{}}
}

func (e *inprocExec) FindInPath(plugin string, paths []string) (string, error) {
	// Still looked up: Status reports a node whose plugins are missing the
	// same way, whichever path a pod takes.
	return e.exec.FindInPath(plugin, paths)
}

func (e *inprocExec) Decode(b []byte) (version.PluginInfo, error) { return e.exec.Decode(b) }

func (e *inprocExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	env := cniEnv(environ)
	conf, ok := inprocBridgeConf(pluginPath, stdin, env)
	if !ok {
		return e.exec.ExecPlugin(ctx, pluginPath, stdin, environ)
	}
	switch env["CNI_COMMAND"] {
	case "ADD":
		res, err := e.bridgeAdd(ctx, conf, stdin, env)
		if err != nil {
			return nil, err
		}
		out, err := res.GetAsVersion(conf.CNIVersion)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	case "DEL":
		return nil, bridgeDel(stdin, env)
	default:
		// CHECK, GC, STATUS, VERSION: rare; the plugin answers them.
		return e.exec.ExecPlugin(ctx, pluginPath, stdin, environ)
	}
}

// cniEnv reads the CNI_ variables of a plugin's environment (the last of a
// name wins, as for a process).
func cniEnv(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "CNI_") {
			env[k] = v
		}
	}
	return env
}

// bridgeNetConf is the bridge plugin's config as BridgeConfList writes it
// (libcni adds name and cniVersion): every field it may have. A config with
// any other (a VLAN, an MTU, ipMasq, a MAC, DNS) is not the default network.
type bridgeNetConf struct {
	CNIVersion  string          `json:"cniVersion"`
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Bridge      string          `json:"bridge"`
	IsGateway   bool            `json:"isGateway"`
	IPMasq      bool            `json:"ipMasq"`
	HairpinMode bool            `json:"hairpinMode"`
	IPAM        json.RawMessage `json:"ipam"`
	// prevResult is never set for the first plugin of the list; libcni
	// passes the cached result on DEL (the bridge plugin ignores it too).
	PrevResult json.RawMessage `json:"prevResult,omitempty"`
}

type hostLocalConf struct {
	Type    string                `json:"type"`
	Ranges  [][]map[string]string `json:"ranges"`
	Routes  []map[string]string   `json:"routes"`
	DataDir string                `json:"dataDir"`
}

// inprocBridgeConf says whether a plugin call is one done in-process: the
// bridge plugin with exactly the default network's config and nothing the
// default network never passes (CNI_ARGS with a MAC).
func inprocBridgeConf(pluginPath string, stdin []byte, env map[string]string) (*bridgeNetConf, bool) {
	if filepath.Base(pluginPath) != "bridge" || env["CNI_IFNAME"] == "" || env["CNI_CONTAINERID"] == "" {
		return nil, false
	}
	for _, a := range strings.Split(env["CNI_ARGS"], ";") {
		if k, _, _ := strings.Cut(a, "="); strings.EqualFold(k, "MAC") || strings.EqualFold(k, "IP") {
			return nil, false
		}
	}
	var c bridgeNetConf
	if strictJSON(stdin, &c) != nil || c.Name != defaultNetworkName || c.Type != "bridge" || c.Bridge == "" || c.IPMasq || !c.IsGateway {
		return nil, false
	}
	var h hostLocalConf
	if strictJSON(c.IPAM, &h) != nil || h.Type != "host-local" || h.DataDir == "" || len(h.Ranges) == 0 {
		return nil, false
	}
	return &c, true
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// isDefaultConf says whether a network config list is the default network
// exactly as BridgeConfList writes it (the bytes a sandbox records): only
// that one takes the in-process path; any other config, a CNI DaemonSet's
// or a hand-written one with the same name, is exec'd.
func isDefaultConf(b []byte) bool {
	var l struct {
		Plugins []struct {
			Bridge string        `json:"bridge"`
			IPAM   hostLocalConf `json:"ipam"`
		} `json:"plugins"`
	}
	if json.Unmarshal(b, &l) != nil || len(l.Plugins) == 0 {
		return false
	}
	p := l.Plugins[0]
	var cidrs []string
	for _, r := range p.IPAM.Ranges {
		if len(r) != 1 {
			return false
		}
		cidrs = append(cidrs, r[0]["subnet"])
	}
	want, err := BridgeConfList(p.Bridge, cidrs, p.IPAM.DataDir)
	return err == nil && bytes.Equal(want, b)
}

// bridgeAdd is the bridge plugin's ADD for the default network's config:
// the bridge, the veth pair, host-local's addresses, the gateway on the
// bridge, forwarding on.
func (e *inprocExec) bridgeAdd(ctx context.Context, c *bridgeNetConf, stdin []byte, env map[string]string) (res *current.Result, err error) {
	id, ifName := env["CNI_CONTAINERID"], env["CNI_IFNAME"]
	br, err := ensureBridge(c.Bridge)
	if err != nil {
		return nil, fmt.Errorf("failed to create bridge %q: %w", c.Bridge, err)
	}
	netns, err := cnins.GetNS(env["CNI_NETNS"])
	if err != nil {
		return nil, fmt.Errorf("failed to open netns %q: %w", env["CNI_NETNS"], err)
	}
	defer netns.Close()
	hostIf, contIf, err := setupVeth(netns, br, ifName, c.HairpinMode)
	if err != nil {
		return nil, err
	}
	res = &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: br.Attrs().Name, Mac: br.Attrs().HardwareAddr.String()}, hostIf, contIf},
	}
	ipamRes, err := hostLocalAdd(stdin, id, ifName, env["CNI_ARGS"])
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// As the plugin: the addresses go back on a failure after IPAM.
			_ = hostLocalDel(stdin, id, ifName, env["CNI_ARGS"])
		}
	}()
	res.IPs, res.Routes, res.DNS = ipamRes.IPs, ipamRes.Routes, ipamRes.DNS
	if len(res.IPs) == 0 {
		return nil, errors.New("IPAM plugin returned missing IP config")
	}
	gws := gateways(res)
	if err = netns.Do(func(cnins.NetNS) error {
		_, _ = sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_dad", ifName), "0")
		_, _ = sysctl.Sysctl(fmt.Sprintf("net/ipv4/conf/%s/arp_notify", ifName), "1")
		return ipam.ConfigureIface(ifName, res)
	}); err != nil {
		return nil, err
	}
	for _, gw := range gws {
		family := netlink.FAMILY_V4
		if gw.IP.To4() == nil {
			family = netlink.FAMILY_V6
		}
		if err = ensureAddr(br, family, &gw); err != nil {
			return nil, fmt.Errorf("failed to set bridge addr: %w", err)
		}
		if family == netlink.FAMILY_V4 {
			err = ip.EnableIP4Forward()
		} else {
			err = ip.EnableIP6Forward()
		}
		if err != nil {
			return nil, fmt.Errorf("failed to enable forwarding: %w", err)
		}
	}
	hostVeth, err := e.waitPortUp(ctx, hostIf.Name)
	if err != nil {
		return nil, err
	}
	// The host side's and the bridge's MACs may change as ports come and go.
	hostIf.Mac = hostVeth.Attrs().HardwareAddr.String()
	if br, err = bridgeByName(c.Bridge); err != nil {
		return nil, err
	}
	res.Interfaces[0].Mac = br.Attrs().HardwareAddr.String()
	return res, nil
}

// portUpWaits are the bridge plugin's waits for the host veth to be up, in
// turn, before the next look.
var portUpWaits = []time.Duration{0, 50 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second}

func (e *inprocExec) waitPortUp(ctx context.Context, name string) (netlink.Link, error) {
	for i, d := range portUpWaits {
		if d > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-e.clock.After(d):
			}
		}
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return nil, err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return l, nil
		}
		if i == len(portUpWaits)-1 {
			return nil, fmt.Errorf("bridge port in error state: %s", l.Attrs().OperState)
		}
	}
	return nil, errors.New("unreachable")
}

// gateways gives each IP its gateway, the first address of its subnet (the
// bridge plugin's isGateway), all IPs to the pod's interface (index 2),
// and returns the bridge's addresses.
func gateways(res *current.Result) []net.IPNet {
	var gws []net.IPNet
	for _, ipc := range res.IPs {
		ipc.Interface = current.Int(2)
		if ipc.Gateway == nil {
			ipc.Gateway = ip.NextIP(ipc.Address.IP.Mask(ipc.Address.Mask))
		}
		gws = append(gws, net.IPNet{IP: ipc.Gateway, Mask: ipc.Address.Mask})
	}
	return gws
}

func bridgeByName(name string) (*netlink.Bridge, error) {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("could not lookup %q: %w", name, err)
	}
	br, ok := l.(*netlink.Bridge)
	if !ok {
		return nil, fmt.Errorf("%q already exists but is not a bridge", name)
	}
	return br, nil
}

// ensureBridge creates the bridge unless it exists, and sets it up.
func ensureBridge(name string) (*netlink.Bridge, error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil && !errors.Is(err, syscall.EEXIST) {
		return nil, fmt.Errorf("could not add %q: %w", name, err)
	}
	br, err := bridgeByName(name)
	if err != nil {
		return nil, err
	}
	// The routes for this interface are the bridge's own (the plugin's rule).
	_, _ = sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_ra", name), "0")
	if err := netlink.LinkSetUp(br); err != nil {
		return nil, err
	}
	return br, nil
}

// setupVeth makes the pod's veth pair in its namespace (ifName inside, a
// random veth name outside), and puts the host end on the bridge.
func setupVeth(netns cnins.NetNS, br *netlink.Bridge, ifName string, hairpin bool) (hostIf, contIf *current.Interface, err error) {
	hostIf, contIf = &current.Interface{}, &current.Interface{}
	err = netns.Do(func(hostNS cnins.NetNS) error {
		hostVeth, contVeth, err := ip.SetupVeth(ifName, 0, "", hostNS)
		if err != nil {
			return err
		}
		contIf.Name, contIf.Mac, contIf.Sandbox = contVeth.Name, contVeth.HardwareAddr.String(), netns.Path()
		hostIf.Name = hostVeth.Name
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	// Looked up again: its index changed with the namespace.
	hostVeth, err := netlinksafe.LinkByName(hostIf.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to lookup %q: %w", hostIf.Name, err)
	}
	hostIf.Mac = hostVeth.Attrs().HardwareAddr.String()
	if err := netlink.LinkSetMaster(hostVeth, br); err != nil {
		return nil, nil, fmt.Errorf("failed to connect %q to bridge %v: %w", hostIf.Name, br.Attrs().Name, err)
	}
	if err := netlink.LinkSetHairpin(hostVeth, hairpin); err != nil {
		return nil, nil, fmt.Errorf("failed to setup hairpin mode for %v: %w", hostIf.Name, err)
	}
	return hostIf, contIf, nil
}

// ensureAddr puts the gateway address on the bridge unless it has it (an
// IPv4 bridge with another address is an error, as for the plugin without
// forceAddress).
func ensureAddr(br netlink.Link, family int, ipn *net.IPNet) error {
	addrs, err := netlinksafe.AddrList(br, family)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("could not get list of IP addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IPNet.String() == ipn.String() {
			return nil
		}
		if family == netlink.FAMILY_V4 || a.IPNet.Contains(ipn.IP) || ipn.Contains(a.IPNet.IP) {
			return fmt.Errorf("%q already has an IP address different from %v", br.Attrs().Name, ipn)
		}
	}
	if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: ipn}); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("could not add IP address to %q: %w", br.Attrs().Name, err)
	}
	// The bridge keeps its own MAC, not the lowest of its ports' (which
	// would change as pods come and go).
	if err := netlink.LinkSetHardwareAddr(br, br.Attrs().HardwareAddr); err != nil {
		return fmt.Errorf("could not set bridge's mac: %w", err)
	}
	return nil
}

// bridgeDel is the bridge plugin's DEL: the pod's interface (if its
// namespace and the interface are still there), then its addresses.
func bridgeDel(stdin []byte, env map[string]string) error {
	id, ifName, args := env["CNI_CONTAINERID"], env["CNI_IFNAME"], env["CNI_ARGS"]
	if env["CNI_NETNS"] == "" {
		return hostLocalDel(stdin, id, ifName, args)
	}
	err := cnins.WithNetNSPath(env["CNI_NETNS"], func(cnins.NetNS) error {
		_, err := ip.DelLinkByNameAddr(ifName)
		if errors.Is(err, ip.ErrLinkNotFound) {
			return nil
		}
		return err
	})
	var gone cnins.NSPathNotExistErr
	if err != nil && !errors.As(err, &gone) {
		return err
	}
	return hostLocalDel(stdin, id, ifName, args)
}

// hostLocalAdd is host-local's ADD: an address from each range, from its
// store under dataDir.
func hostLocalAdd(stdin []byte, id, ifName, args string) (*current.Result, error) {
	conf, _, err := allocator.LoadIPAMConfig(stdin, args)
	if err != nil {
		return nil, err
	}
	store, err := disk.New(conf.Name, conf.DataDir)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	var allocs []*allocator.IPAllocator
	for i := range conf.Ranges {
		a := allocator.NewIPAllocator(&conf.Ranges[i], store, i)
		ipc, err := a.Get(id, ifName, nil)
		if err != nil {
			for _, a := range allocs {
				_ = a.Release(id, ifName)
			}
			return nil, fmt.Errorf("failed to allocate for range %d: %w", i, err)
		}
		allocs = append(allocs, a)
		res.IPs = append(res.IPs, ipc)
	}
	res.Routes = conf.Routes
	return res, nil
}

// hostLocalDel is host-local's DEL: the pod's addresses in every range
// released, whatever fails.
func hostLocalDel(stdin []byte, id, ifName, args string) error {
	conf, _, err := allocator.LoadIPAMConfig(stdin, args)
	if err != nil {
		return err
	}
	store, err := disk.New(conf.Name, conf.DataDir)
	if err != nil {
		return err
	}
	defer store.Close()
	var errs []error
	for i := range conf.Ranges {
		if err := allocator.NewIPAllocator(&conf.Ranges[i], store, i).Release(id, ifName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

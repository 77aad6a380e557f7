package runtime

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/netns"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	cnins "github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Debian's containernetworking-plugins, as the e2e harness uses them.
const testPluginDir = "/usr/lib/cni"

func TestIsDefaultConf(t *testing.T) {
	for _, cidrs := range [][]string{{"10.244.1.0/24"}, {"10.244.1.0/24", "fd00:1::/64"}} {
		b, err := BridgeConfList("cbr0", cidrs, "/var/lib/cni/networks")
		if err != nil {
			t.Fatal(err)
		}
		if !isDefaultConf(b) {
			t.Errorf("BridgeConfList(%v) is not the default network", cidrs)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		indented, _ := json.MarshalIndent(m, "", " ")
		if isDefaultConf(indented) {
			t.Error("a config with other bytes (reformatted) counts as the default network")
		}
		m["plugins"].([]any)[0].(map[string]any)["ipMasq"] = true
		changed, _ := json.Marshal(m)
		if isDefaultConf(changed) {
			t.Error("a config with ipMasq counts as the default network")
		}
	}
	for _, other := range []string{
		testConf,
		`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`,
		`not json`, `{}`,
	} {
		if isDefaultConf([]byte(other)) {
			t.Errorf("%s counts as the default network", other)
		}
	}
}

func TestCNIEnv(t *testing.T) {
	env := cniEnv([]string{"PATH=/bin", "CNI_COMMAND=DEL", "CNI_ARGS=A=1;B=2", "CNI_COMMAND=ADD", "broken"})
	if env["CNI_COMMAND"] != "ADD" || env["CNI_ARGS"] != "A=1;B=2" || len(env) != 2 {
		t.Errorf("cniEnv: %v", env)
	}
}

// captureExec records what libcni hands a plugin.
type captureExec struct {
	calls []struct {
		path  string
		stdin []byte
		env   []string
	}
}

func (c *captureExec) ExecPlugin(_ context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	c.calls = append(c.calls, struct {
		path  string
		stdin []byte
		env   []string
	}{path, stdin, env})
	return []byte(`{"cniVersion":"1.0.0","ips":[{"address":"10.244.1.2/24"}]}`), nil
}
func (c *captureExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/opt/cni/bin/" + plugin, nil
}
func (c *captureExec) Decode([]byte) (version.PluginInfo, error) { return nil, nil }

// What libcni passes the bridge plugin of the default network, on ADD and
// on DEL (with the cached result), is done in-process; portmap's calls,
// another network's and a MAC asked for through CNI_ARGS are not.
func TestInprocTakesOnlyTheDefaultBridge(t *testing.T) {
	b, err := BridgeConfList("cbr0", []string{"10.244.1.0/24"}, "/var/lib/cni/networks")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	capt := &captureExec{}
	cni := libcni.NewCNIConfigWithCacheDir([]string{"/opt/cni/bin"}, t.TempDir(), capt)
	n := &Network{}
	rt := n.runtimeConf("0123abcd", "/run/netns/x", PodNetworkArgs{Namespace: "ns", Name: "p", UID: "u",
		PortMappings: []PortMapping{{HostPort: 80, ContainerPort: 8080, Protocol: "tcp"}}})
	if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	if err := cni.DelNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	if len(capt.calls) != 4 {
		t.Fatalf("%d plugin calls, want 4", len(capt.calls))
	}
	for i, want := range []bool{true, false, false, true} { // ADD bridge, portmap; DEL portmap, bridge
		c := capt.calls[i]
		if _, got := inprocBridgeConf(c.path, c.stdin, cniEnv(c.env)); got != want {
			t.Errorf("call %d (%s %s): in-process %v, want %v", i, cniEnv(c.env)["CNI_COMMAND"], c.path, got, want)
		}
	}
	add := capt.calls[0]
	env := cniEnv(add.env)
	withMAC := env
	withMAC["CNI_ARGS"] += ";MAC=02:00:00:00:00:01"
	if _, ok := inprocBridgeConf(add.path, add.stdin, withMAC); ok {
		t.Error("a MAC in CNI_ARGS is done in-process")
	}
	env = cniEnv(add.env)
	renamed := strings.Replace(string(add.stdin), defaultNetworkName, "other", 1)
	if _, ok := inprocBridgeConf(add.path, []byte(renamed), env); ok {
		t.Error("another network's bridge is done in-process")
	}
	withMTU := strings.Replace(string(add.stdin), `"bridge":"cbr0"`, `"bridge":"cbr0","mtu":1400`, 1)
	if withMTU == string(add.stdin) {
		t.Fatalf("no bridge field in %s", add.stdin)
	}
	if _, ok := inprocBridgeConf(add.path, []byte(withMTU), env); ok {
		t.Error("a bridge config with an MTU is done in-process")
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = string(b)
	}
	return got
}

// The in-process host-local leaves the files the plugin's executable
// leaves, and each releases what the other reserved.
func TestHostLocalLikeThePlugin(t *testing.T) {
	if _, err := os.Stat(filepath.Join(testPluginDir, "host-local")); err != nil {
		t.Skip("no host-local plugin in " + testPluginDir)
	}
	data := t.TempDir()
	b, err := BridgeConfList("cbr0", []string{"10.244.1.0/24"}, data)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	// The bridge plugin's stdin: the list's name and version added.
	var plugin map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &plugin); err != nil {
		t.Fatal(err)
	}
	plugin["name"], plugin["cniVersion"] = list.Name, list.CNIVersion
	stdin, _ := json.Marshal(plugin)
	const args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"
	execHostLocal := func(cmd, id string) {
		t.Helper()
		c := exec.Command(filepath.Join(testPluginDir, "host-local"))
		c.Stdin = strings.NewReader(string(stdin))
		c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_NETNS=/x", "CNI_IFNAME=eth0", "CNI_ARGS=" + args, "CNI_PATH=" + testPluginDir}
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("host-local %s: %v: %s", cmd, err, out)
		}
	}
	dir := filepath.Join(data, defaultNetworkName)

	res, err := hostLocalAdd(stdin, "pod-a", "eth0", args)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.244.1.2/24" || res.IPs[0].Gateway.String() != "10.244.1.1" {
		t.Fatalf("in-process ADD: %+v", res.IPs)
	}
	if len(res.Routes) != 1 || res.Routes[0].Dst.String() != "0.0.0.0/0" {
		t.Errorf("routes %v", res.Routes)
	}
	execHostLocal("ADD", "pod-b")
	got := readDir(t, dir)
	want := map[string]string{"lock": "", "10.244.1.2": "pod-a\r\neth0", "10.244.1.3": "pod-b\r\neth0", "last_reserved_ip.0": "10.244.1.3"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("after ADDs: %s = %q, want %q (all: %q)", k, got[k], v, got)
		}
	}
	execHostLocal("DEL", "pod-a")
	if err := hostLocalDel(stdin, "pod-b", "eth0", args); err != nil {
		t.Fatal(err)
	}
	if err := hostLocalDel(stdin, "pod-b", "eth0", args); err != nil {
		t.Errorf("a repeated DEL: %v", err)
	}
	got = readDir(t, dir)
	if len(got) != 2 || got["last_reserved_ip.0"] != "10.244.1.3" {
		t.Errorf("after the DELs: %q", got)
	}
}

// In a node namespace of the test's: the in-process ADD sets up what the
// plugins would (bridge with the gateway, the pod's eth0 with its address
// and default route, a veth on the bridge), the plugins' DEL tears it down
// and releases the address; and a pod the plugins set up is torn down
// in-process.
func TestInprocAndExecInterchange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	for _, p := range []string{"bridge", "host-local"} {
		if _, err := os.Stat(filepath.Join(testPluginDir, p)); err != nil {
			t.Skip("no " + p + " plugin in " + testPluginDir)
		}
	}
	nsDir := t.TempDir()
	node, err := netns.NewNetNS(nsDir)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Remove()
	data, cache := t.TempDir(), t.TempDir()
	b, err := BridgeConfList("hltest0", []string{"10.99.1.0/24"}, data)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	// As Attach: portmap left out for a pod without hostPorts.
	list = forPod(list, PodNetworkArgs{})
	realExec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	execd := libcni.NewCNIConfigWithCacheDir([]string{testPluginDir}, cache, realExec)
	inproc := libcni.NewCNIConfigWithCacheDir([]string{testPluginDir}, cache, newInprocExec(realExec))
	ctx := context.Background()
	n := &Network{}

	attach := func(cni *libcni.CNIConfig, id string) (pod *netns.NetNS, ip string) {
		t.Helper()
		p, err := netns.NewNetNS(nsDir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Remove() })
		var res *current.Result
		if err := node.Do(func(cnins.NetNS) error {
			r, err := cni.AddNetworkList(ctx, list, n.runtimeConf(id, p.GetPath(), PodNetworkArgs{UID: id}))
			if err != nil {
				return err
			}
			res, err = current.NewResultFromResult(r)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(res.Interfaces) != 3 || res.Interfaces[0].Name != "hltest0" || !strings.HasPrefix(res.Interfaces[1].Name, "veth") ||
			res.Interfaces[2].Name != "eth0" || res.Interfaces[2].Sandbox != p.GetPath() {
			t.Errorf("interfaces %+v", res.Interfaces)
		}
		if len(res.IPs) != 1 || *res.IPs[0].Interface != 2 || res.IPs[0].Gateway.String() != "10.99.1.1" {
			t.Fatalf("IPs %+v", res.IPs)
		}
		if err := p.Do(func(cnins.NetNS) error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != res.IPs[0].Address.String() {
				t.Errorf("eth0 addresses %v (%v), want %s", addrs, err, res.IPs[0].Address.String())
			}
			routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
			found := false
			for _, r := range routes {
				found = found || (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.String() == "10.99.1.1"
			}
			if err != nil || !found {
				t.Errorf("no default route via the gateway: %v (%v)", routes, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := node.Do(func(cnins.NetNS) error {
			br, err := netlink.LinkByName("hltest0")
			if err != nil {
				return err
			}
			addrs, _ := netlink.AddrList(br, netlink.FAMILY_V4)
			if len(addrs) != 1 || addrs[0].IPNet.String() != "10.99.1.1/24" {
				t.Errorf("bridge addresses %v", addrs)
			}
			veth, err := netlink.LinkByName(res.Interfaces[1].Name)
			if err != nil {
				return err
			}
			pi, err := netlink.LinkGetProtinfo(veth)
			if veth.Attrs().MasterIndex != br.Attrs().Index || err != nil || !pi.Hairpin {
				t.Errorf("host veth %s: master %d (bridge %d), hairpin %v (%v)", veth.Attrs().Name, veth.Attrs().MasterIndex, br.Attrs().Index, pi.Hairpin, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := cni.GetNetworkListCachedResult(list, n.runtimeConf(id, p.GetPath(), PodNetworkArgs{UID: id})); err != nil {
			t.Errorf("no cached result: %v", err)
		}
		return p, res.IPs[0].Address.IP.String()
	}
	detach := func(cni *libcni.CNIConfig, id string, pod *netns.NetNS, ip string) {
		t.Helper()
		if err := node.Do(func(cnins.NetNS) error {
			return cni.DelNetworkList(ctx, list, n.runtimeConf(id, pod.GetPath(), PodNetworkArgs{UID: id}))
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(data, defaultNetworkName, ip)); !os.IsNotExist(err) {
			t.Errorf("address %s still reserved: %v", ip, err)
		}
		if _, err := os.Stat(pod.GetPath()); err != nil {
			return // the namespace is gone, and eth0 with it
		}
		if err := pod.Do(func(cnins.NetNS) error {
			if _, err := netlink.LinkByName("eth0"); err == nil {
				t.Error("eth0 still in the pod after DEL")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(cache, "results", defaultNetworkName+"-"+id+"-eth0")); !os.IsNotExist(err) {
			t.Errorf("cached result left: %v", err)
		}
	}

	podA, ipA := attach(inproc, "pod-a")
	podB, ipB := attach(execd, "pod-b")
	if ipA == ipB {
		t.Fatalf("both pods got %s", ipA)
	}
	// The pods reach each other over the bridge: a socket belongs to the
	// namespace it is made in.
	var ln net.Listener
	if err := podB.Do(func(cnins.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ipB, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	if err := podA.Do(func(cnins.NetNS) error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Errorf("pod A to pod B: %v", err)
	}
	detach(execd, "pod-a", podA, ipA)
	detach(inproc, "pod-b", podB, ipB)
	// Repeated, and with the namespace gone: DEL still succeeds.
	_ = podB.Remove()
	detach(inproc, "pod-b", podB, ipB)
}

// Only the default network hostlet loads itself takes the in-process path.
func TestNetworkInprocOnlyForDefault(t *testing.T) {
	n, err := NewNetwork(t.TempDir(), nil, t.TempDir(), "cbr0")
	if err != nil {
		t.Fatal(err)
	}
	n.SetPodCIDRs([]string{"10.244.1.0/24"})
	conf, err := n.Conf()
	if err != nil {
		t.Fatal(err)
	}
	list, err := n.listFor(conf)
	if err != nil {
		t.Fatal(err)
	}
	if n.cniFor(list) != n.inproc || n.cniFor(forPod(list, PodNetworkArgs{})) != n.inproc {
		t.Error("the default network is exec'd")
	}
	other, err := n.listFor([]byte(testConf))
	if err != nil {
		t.Fatal(err)
	}
	if n.cniFor(other) != n.cni {
		t.Error("a CNI DaemonSet's config is not exec'd")
	}
}

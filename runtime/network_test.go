package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

const testConf = `{"cniVersion":"1.0.0","name":"from-daemonset","plugins":[{"type":"bridge","bridge":"x0"}]}`

func loaded(n *Network) string {
	list, err := n.config()
	if err != nil {
		return err.Error()
	}
	return list.Name
}

// A node without config is not initialized, the default network appears with
// the node's pod CIDRs, and a config in the directory wins over it.
func TestNetworkDefaultBridgeFromPodCIDRs(t *testing.T) {
	dir := t.TempDir()
	n, err := NewNetwork(dir, nil, t.TempDir(), "cbr0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.config(); !errors.Is(err, ErrCNINotInitialized) {
		t.Fatalf("empty dir: %v", err)
	}
	n.SetPodCIDRs([]string{"10.244.1.0/24", "fd00:1::/64"})
	if got := loaded(n); got != defaultNetworkName {
		t.Fatalf("with pod CIDRs: %s", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-ds.conflist"), []byte(testConf), 0o644); err != nil {
		t.Fatal(err)
	}
	n.reload("test")
	if got := loaded(n); got != "from-daemonset" {
		t.Fatalf("with a config file: %s", got)
	}

	off, err := NewNetwork(t.TempDir(), nil, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	off.SetPodCIDRs([]string{"10.244.1.0/24"})
	if _, err := off.config(); !errors.Is(err, ErrCNINotInitialized) {
		t.Fatalf("no default bridge: %v", err)
	}
}

// Watch reloads on a file written, changed and removed, telling the
// subscriber each time, with no poll.
func TestNetworkWatch(t *testing.T) {
	dir := t.TempDir()
	n, err := NewNetwork(dir, nil, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		done <- n.Watch(ctx, func() { changed <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()
	<-started
	// Whether the file lands before the watch is in place or after, the
	// watch's first load or its event loads it, and either tells.
	f := filepath.Join(dir, "10-ds.conflist")
	waitFor := func(want string) {
		t.Helper()
		for loaded(n) != want {
			<-changed
		}
	}
	if err := os.WriteFile(f, []byte(testConf), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("from-daemonset")
	if err := os.WriteFile(f, []byte(`{"cniVersion":"1.0.0","name":"changed","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("changed")
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	waitFor(ErrCNINotInitialized.Error())
}

// A pod is torn down with the config it was attached with, not whatever the
// directory holds by then; a sandbox that recorded none gets the loaded one.
func TestNetworkTeardownUsesRecordedConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-a.conflist"), []byte(testConf), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := NewNetwork(dir, nil, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := n.Conf()
	if err != nil {
		t.Fatal(err)
	}
	// The state file keeps it as JSON and gives it back.
	s := &Sandbox{Dir: t.TempDir(), NetworkConf: recorded}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.stateFile())
	if err != nil {
		t.Fatal(err)
	}
	var back Sandbox
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}

	other := `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge","bridge":"x1"}]}`
	if err := os.WriteFile(filepath.Join(dir, "05-b.conflist"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	n.reload("test")
	if got := loaded(n); got != "other" {
		t.Fatalf("loaded %s", got)
	}
	if list, err := n.listFor(back.NetworkConf); err != nil || list.Name != "from-daemonset" {
		t.Fatalf("teardown config %v, %v", list, err)
	}
	if list, err := n.listFor(nil); err != nil || list.Name != "other" {
		t.Fatalf("nothing recorded: %v, %v", list, err)
	}
	// With no config left at all, the recorded one still tears the pod down.
	for _, f := range []string{"05-b.conflist", "10-a.conflist"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	n.reload("test")
	if list, err := n.listFor(back.NetworkConf); err != nil || list.Name != "from-daemonset" {
		t.Fatalf("config dir empty: %v, %v", list, err)
	}
}

// Host ports go to CNI as the portMappings capability (libcni gives it to
// the plugins that declare it), on ADD and DEL alike; a pod without any
// sends none.
func TestRuntimeConfPortMappings(t *testing.T) {
	n := &Network{}
	pm := []PortMapping{{HostPort: 30080, ContainerPort: 8080, Protocol: "tcp", HostIP: "10.0.0.1"}}
	rt := n.runtimeConf("id", "/ns", PodNetworkArgs{PortMappings: pm})
	b, err := json.Marshal(rt.CapabilityArgs)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"portMappings":[{"hostPort":30080,"containerPort":8080,"protocol":"tcp","hostIP":"10.0.0.1"}]}`; string(b) != want {
		t.Errorf("capability args %s, want %s", b, want)
	}
	if rt := n.runtimeConf("id", "/ns", PodNetworkArgs{}); rt.CapabilityArgs != nil {
		t.Errorf("no host ports: %v", rt.CapabilityArgs)
	}
}

// portmap runs only for pods with host ports; the rest of the list, and a
// list without portmap, is left as it is.
func TestForPodSkipsPortmapWithoutHostPorts(t *testing.T) {
	conf, err := BridgeConfList("cni0", []string{"10.88.0.0/24"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	types := func(l *libcni.NetworkConfigList) (ts []string) {
		for _, p := range l.Plugins {
			ts = append(ts, p.Network.Type)
		}
		return ts
	}
	if got := types(forPod(list, PodNetworkArgs{})); !slices.Equal(got, []string{"bridge"}) {
		t.Errorf("pod without host ports runs %v, want [bridge]", got)
	}
	pm := PodNetworkArgs{PortMappings: []PortMapping{{HostPort: 30080, ContainerPort: 80, Protocol: "tcp"}}}
	if got := types(forPod(list, pm)); !slices.Equal(got, []string{"bridge", "portmap"}) {
		t.Errorf("pod with host ports runs %v, want [bridge portmap]", got)
	}
	if got := types(list); !slices.Equal(got, []string{"bridge", "portmap"}) {
		t.Errorf("the loaded list was changed: %v", got)
	}
}

// The CNI state as containerd's verbose status has it: dirs, one config,
// the loopback network then the loaded list on eth0; none before a load.
func TestNetworkConfigInfo(t *testing.T) {
	n := &Network{confDir: "/etc/cni/net.d", binDirs: []string{"/opt/cni/bin"}}
	if info := n.ConfigInfo(); info.PluginConfDir != "/etc/cni/net.d" || info.PluginMaxConfNum != 1 || info.Prefix != "eth" || len(info.Networks) != 0 {
		t.Errorf("before a load: %+v", info)
	}
	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"},{"type":"portmap"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	n.list = list
	info := n.ConfigInfo()
	if len(info.Networks) != 2 || info.Networks[0].IFName != "lo" || info.Networks[0].Config.Name != "cni-loopback" ||
		info.Networks[1].IFName != "eth0" || info.Networks[1].Config.Name != "pods" || len(info.Networks[1].Config.Plugins) != 2 ||
		info.Networks[1].Config.Plugins[1].Source != `{"type":"portmap"}` {
		t.Errorf("loaded: %+v", info)
	}
}

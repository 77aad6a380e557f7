package join

import (
	"strings"
	"testing"
)

// join --image-snapshotter=stargz sets hostlet's flag and writes the
// snapshotter's unit, resolving registries where hostlet does.
func TestStargzSettingsAndUnit(t *testing.T) {
	cfg := Config{NodeName: "n1", RootDir: "/var/lib/kubelet", Layout: Layout{StateDir: "/var/lib/hostlet", UnitDir: "/etc/systemd/system"},
		Preflight:     PreflightConfig{RuntimeEndpoint: "unix:///run/containerd/containerd.sock", ImageSnapshotter: "stargz"},
		ExtraSettings: map[string]string{"registry-config-dir": "/etc/containerd/certs.d"}}
	_, flags, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	if flags["image-snapshotter"] != "stargz" {
		t.Errorf("flags %v: no image-snapshotter=stargz", flags)
	}
	u := stargzUnitFile(cfg.Layout, "/usr/bin/hostlet", flags["registry-config-dir"])
	if u.path != "/etc/systemd/system/hostlet-stargz-snapshotter.service" {
		t.Errorf("unit at %s", u.path)
	}
	if want := "ExecStart=/usr/bin/hostlet stargz-snapshotter --registry-config-dir /etc/containerd/certs.d\n"; !strings.Contains(string(u.data), want) {
		t.Errorf("unit %s\nwants %q", u.data, want)
	}
}

func TestCheckStargz(t *testing.T) {
	if _, err := checkStargz(t.Context(), PreflightConfig{}); err != nil {
		t.Errorf("without lazy pulls: %v", err)
	}
	if _, err := checkStargz(t.Context(), PreflightConfig{ImageSnapshotter: "nydus"}); err == nil || !strings.Contains(err.Error(), `only "stargz"`) {
		t.Errorf("an unknown snapshotter: %v", err)
	}
}

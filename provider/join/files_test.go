package join

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlet/hostlet/kubeletconfig"
)

func TestFileWriteIsAtomicAndIdempotent(t *testing.T) {
	dir := t.TempDir()
	f := file{path: filepath.Join(dir, "a", "config.yaml"), mode: 0o600, data: []byte("x: 1\n")}
	if err := f.write(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(f.path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, err %v", st.Mode().Perm(), err)
	}
	// Unchanged content: the file is left alone (same inode, same mtime).
	old := time.Unix(1, 0)
	os.Chtimes(f.path, old, old)
	if err := f.write(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(f.path); !st.ModTime().Equal(old) {
		t.Error("an identical file was rewritten")
	}
	f.data = []byte("x: 2\n")
	if err := f.write(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(f.path); string(b) != "x: 2\n" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(f.path))
	if len(entries) != 1 {
		t.Errorf("temp files left: %v", entries)
	}
}

// A file join rewrites gets join's mode, whatever the old file had or the
// umask says: a key chmod'ed 0644 by hand is private again after a rerun.
func TestFileWriteSetsMode(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "pki", "hostlet.key")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (file{path: key, mode: 0o600, data: []byte("new")}).write(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten key mode %v, err %v; want 0600", st.Mode().Perm(), err)
	}
	// A new world-readable file is 0644 even under a umask that would strip
	// group and other bits: the unit and the CA must be readable.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	ca := filepath.Join(dir, "pki", "ca.crt")
	if err := (file{path: ca, mode: 0o644, data: []byte("ca")}).write(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(ca); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("new CA mode %v, err %v; want 0644", st.Mode().Perm(), err)
	}
}

func TestRemoveLeavesForeignFiles(t *testing.T) {
	l := Layout{StateDir: filepath.Join(t.TempDir(), "state"), UnitDir: t.TempDir()}
	for _, f := range []file{
		{path: l.Kubeconfig(), mode: 0o600, data: []byte("k")},
		{path: l.ConfigFile(), mode: 0o600, data: []byte("c")},
		{path: l.FlagsFile(), mode: 0o644, data: []byte("f")},
		{path: l.CAFile(), mode: 0o644, data: []byte("ca")},
		{path: l.UnitFile(), mode: 0o644, data: []byte("u")},
	} {
		if err := f.write(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(l.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir still there: %v", err)
	}
	if _, err := os.Stat(l.UnitFile()); !os.IsNotExist(err) {
		t.Errorf("unit still there: %v", err)
	}

	// Something join did not write stays, and is named.
	if err := (file{path: l.Kubeconfig(), mode: 0o600, data: []byte("k")}).write(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(l.StateDir, "pods"), nil, 0o600)
	err := l.remove()
	if err == nil || !strings.Contains(err.Error(), "pods") {
		t.Fatalf("remove = %v, want it to name what it left", err)
	}
	if _, err := os.Stat(l.Kubeconfig()); !os.IsNotExist(err) {
		t.Error("kubeconfig not removed")
	}
}

// join writes a KubeletConfiguration the kubelet's strict decoding takes
// as it is, and the other flags to the flags file, which the unit passes
// and ReadFlagsFile reads back.
func TestConfigAndFlagsFiles(t *testing.T) {
	cfg := Config{NodeName: "n1", RootDir: "/var/lib/kubelet", Layout: Layout{StateDir: "/var/lib/hostlet"},
		Preflight:     PreflightConfig{RuntimeEndpoint: "unix:///run/containerd/containerd.sock", CNIConfDir: "/etc/cni/net.d", CNIBinDirs: []string{"/a", "/b"}},
		ExtraSettings: map[string]string{"node-ip": "10.0.0.5", "cluster-dns": "10.96.0.10"}}
	kubelet, flags, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	clusterDNS{servers: []string{"10.96.0.10"}, domain: "cluster.local"}.apply(kubelet)
	f, err := configFile(cfg.Layout, kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if f.mode != 0o600 || f.path != "/var/lib/hostlet/config.yaml" {
		t.Errorf("config file %s %v", f.path, f.mode)
	}
	kc, warning, err := kubeletconfig.Decode(f.data)
	if err != nil || warning != "" {
		t.Fatalf("not a strict KubeletConfiguration: %v %q\n%s", err, warning, f.data)
	}
	if kc.TLSCertFile != "/var/lib/hostlet/pki/hostlet.crt" || kc.TLSPrivateKeyFile != "/var/lib/hostlet/pki/hostlet.key" ||
		kc.Authentication.X509.ClientCAFile != "/var/lib/hostlet/pki/ca.crt" || !kc.RotateCertificates ||
		kc.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" ||
		!reflect.DeepEqual(kc.ClusterDNS, []string{"10.96.0.10"}) || kc.ClusterDomain != "cluster.local" {
		t.Errorf("KubeletConfiguration:\n%s", f.data)
	}

	ff := flagsFile(cfg.Layout, flags)
	want := `HOSTLET_ARGS="--cni-bin-dir=/a,/b --cni-conf-dir=/etc/cni/net.d --hostname-override=n1 --kubeconfig=/var/lib/hostlet/kubeconfig --node-ip=10.0.0.5 --root-dir=/var/lib/kubelet"`
	if !strings.Contains(string(ff.data), want+"\n") || ff.path != "/var/lib/hostlet/hostlet-flags.env" {
		t.Errorf("flags file %s:\n%s\nwant %s", ff.path, ff.data, want)
	}
	dir := t.TempDir()
	ff.path = filepath.Join(dir, "hostlet-flags.env")
	if err := ff.write(); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFlagsFile(ff.path)
	if err != nil || !reflect.DeepEqual(back, flags) {
		t.Errorf("read back %v, %v; want %v", back, err, flags)
	}
	if none, err := ReadFlagsFile(filepath.Join(dir, "missing")); err != nil || len(none) != 0 {
		t.Errorf("no flags file: %v %v", none, err)
	}
	bad := cfg
	bad.ExtraSettings = map[string]string{"node-labels": "a=b c"}
	if _, _, err := bad.settings(); err == nil {
		t.Error("a value with a space accepted for the flags file")
	}
}

func TestUnitRequiresContainerd(t *testing.T) {
	u := string(unitFile(Layout{StateDir: "/s", UnitDir: "/u"}, "/usr/local/bin/hostlet").data)
	for _, want := range []string{"Requires=containerd.service", "After=network-online.target containerd.service",
		"Type=notify", "WatchdogSec=30s", "Restart=always",
		"EnvironmentFile=-/s/hostlet-flags.env", "ExecStart=/usr/local/bin/hostlet --config /s/config.yaml $HOSTLET_ARGS", "WantedBy=multi-user.target"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
}

// join writes the cgroup layout it is given into hostlet's
// KubeletConfiguration, checked as hostlet checks it at start; without it,
// hostlet's defaults.
func TestSettingsCgroups(t *testing.T) {
	cfg := Config{NodeName: "n1", RootDir: "/var/lib/kubelet", Layout: Layout{StateDir: "/var/lib/hostlet"}}
	s, flags, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s["cgroupRoot"]; ok {
		t.Errorf("cgroupRoot written unasked: %v", s)
	}
	if _, ok := s["cgroupDriver"]; ok {
		t.Errorf("cgroupDriver written unasked: %v", s)
	}
	cfg.CgroupDriver, cfg.CgroupRoot = "systemd", "/hosted/pods"
	s, flags, err = cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s["cgroupDriver"] != "systemd" || s["cgroupRoot"] != "/hosted/pods" || flags["hostname-override"] != "n1" {
		t.Errorf("settings %v %v", s, flags)
	}
	f, err := configFile(cfg.Layout, s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f.data), "cgroupDriver: systemd\n") || !strings.Contains(string(f.data), "cgroupRoot: /hosted/pods\n") {
		t.Errorf("config file:\n%s", f.data)
	}
	for _, bad := range []Config{{CgroupDriver: "docker"}, {CgroupRoot: "/a_b"}, {CgroupDriver: "systemd", CgroupRoot: "/pods_x"}} {
		if _, _, err := bad.settings(); err == nil {
			t.Errorf("driver %q root %q accepted", bad.CgroupDriver, bad.CgroupRoot)
		}
	}
}

package join

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

func TestConfigFileKeysAreFlags(t *testing.T) {
	l := Layout{StateDir: "/var/lib/hostlet"}
	f, err := configFile(l, map[string]any{"kubeconfig": l.Kubeconfig(), "cni-bin-dir": []string{"/a", "/b"}})
	if err != nil {
		t.Fatal(err)
	}
	got := string(f.data)
	for _, want := range []string{"kubeconfig: /var/lib/hostlet/kubeconfig\n", "cni-bin-dir:\n- /a\n- /b\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	if f.mode != 0o600 {
		t.Errorf("mode %v", f.mode)
	}
}

func TestUnitRequiresContainerd(t *testing.T) {
	u := string(unitFile(Layout{StateDir: "/s", UnitDir: "/u"}, "/usr/local/bin/hostlet").data)
	for _, want := range []string{"Requires=containerd.service", "After=network-online.target containerd.service",
		"ExecStart=/usr/local/bin/hostlet --config /s/config.yaml", "WantedBy=multi-user.target"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
}

// join writes the cgroup layout it is given into hostlet's config, checked
// as hostlet checks it at start; without it, hostlet's defaults.
func TestSettingsCgroups(t *testing.T) {
	cfg := Config{NodeName: "n1", RootDir: "/var/lib/kubelet", Layout: Layout{StateDir: "/var/lib/hostlet"}}
	s, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s["cgroup-root"]; ok {
		t.Errorf("cgroup-root written unasked: %v", s)
	}
	if _, ok := s["cgroup-driver"]; ok {
		t.Errorf("cgroup-driver written unasked: %v", s)
	}
	cfg.CgroupDriver, cfg.CgroupRoot = "systemd", "/hosted/pods"
	s, err = cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s["cgroup-driver"] != "systemd" || s["cgroup-root"] != "/hosted/pods" || s["hostname-override"] != "n1" {
		t.Errorf("settings %v", s)
	}
	f, err := configFile(cfg.Layout, s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f.data), "cgroup-driver: systemd\n") || !strings.Contains(string(f.data), "cgroup-root: /hosted/pods\n") {
		t.Errorf("config file:\n%s", f.data)
	}
	for _, bad := range []Config{{CgroupDriver: "docker"}, {CgroupRoot: "/a_b"}, {CgroupDriver: "systemd", CgroupRoot: "/pods_x"}} {
		if _, err := bad.settings(); err == nil {
			t.Errorf("driver %q root %q accepted", bad.CgroupDriver, bad.CgroupRoot)
		}
	}
}

package join

import (
	"os"
	"path/filepath"
	"testing"
)

// crictl.yaml points at the CRI socket, and only where none exists.
func TestCrictlFile(t *testing.T) {
	dir := t.TempDir()
	l := Layout{StateDir: dir, CrictlConfig: filepath.Join(dir, "crictl.yaml")}
	f, ok := crictlFile(l, map[string]string{})
	want := "runtime-endpoint: unix:///run/hostlet/cri.sock\nimage-endpoint: unix:///run/hostlet/cri.sock\n"
	if !ok || string(f.data) != want || f.path != l.CrictlConfig {
		t.Fatalf("default: %v %q", ok, f.data)
	}
	if err := f.write(); err != nil {
		t.Fatal(err)
	}
	if f, ok := crictlFile(l, map[string]string{"cri-socket": "/run/x.sock"}); ok {
		t.Errorf("written over an existing file: %q", f.data)
	}
	os.Remove(l.CrictlConfig)
	if f, ok := crictlFile(l, map[string]string{"cri-socket": "/run/x.sock"}); !ok || string(f.data) != "runtime-endpoint: unix:///run/x.sock\nimage-endpoint: unix:///run/x.sock\n" {
		t.Errorf("socket flag: %v %q", ok, f.data)
	}
	if _, ok := crictlFile(l, map[string]string{"cri-socket": ""}); ok {
		t.Error("no socket served, yet a crictl.yaml")
	}
	if _, ok := crictlFile(Layout{StateDir: dir}, nil); ok {
		t.Error("no path, yet a crictl.yaml")
	}
}

package csi

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hostlet/hostlet/provider/volumes"
	"golang.org/x/sys/unix"
)

// leave --force with no driver: the CSI mounts (a published volume, a
// mount stacked below it, a staging mount) are unmounted deepest first
// and their directories removed; another plugin's volume stays mounted.
func TestForceTearDownAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := volumes.NewLayout(root)
	published := TargetPath(l, "u1", "pv1")
	nested := filepath.Join(published, "inner")
	staging := StagingPath(l, "drv", "vol1")
	emptyDir := l.PodVolumeDir("u1", "kubernetes.io/empty-dir", "scratch")
	mount := func(dir string) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	}
	for _, d := range []string{published, nested, staging, emptyDir} {
		mount(d)
	}
	m := New(Config{RootDir: root})
	unmounted, err := m.ForceTearDownAll()
	if err != nil {
		t.Fatal(err)
	}
	// Reverse order: deepest first, and pods/ before plugins/ (published
	// before staged, as a driver would).
	if want := []string{nested, published, staging}; !slices.Equal(unmounted, want) {
		t.Errorf("unmounted %v, want %v", unmounted, want)
	}
	left, err := l.MountsBelow()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{emptyDir}) {
		t.Errorf("mounts left %v, want the emptyDir only", left)
	}
	for _, d := range []string{filepath.Dir(VolumeDir(l, "u1", "x")), l.PluginDir(PluginName)} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s stays: %v", d, err)
		}
	}
	if _, err := os.Stat(emptyDir); err != nil {
		t.Errorf("the emptyDir volume: %v", err)
	}
}

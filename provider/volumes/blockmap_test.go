package volumes

import (
	"os"
	"path/filepath"
	"testing"
)

// Only a block device (through its symlinks) is mapped.
func TestBlockDevice(t *testing.T) {
	dir := t.TempDir()
	if _, err := BlockDevice(dir); err == nil || err.Error() != dir+" is not a block device" {
		t.Errorf("a directory: %v", err)
	}
	if _, err := BlockDevice("/dev/null"); err == nil || err.Error() != "/dev/null is not a block device" {
		t.Errorf("a character device: %v", err)
	}
	if _, err := BlockDevice(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing path mapped")
	}
}

// Teardown finds a pod's block volumes on disk: its bind files under every
// plugin's global map paths and its symlinks go, a map path goes with its
// last pod, another pod's stays.
func TestTearDownBlock(t *testing.T) {
	l := NewLayout(t.TempDir())
	global := l.GlobalMapPath("kubernetes.io/local-volume", "pv-1")
	shared := l.GlobalMapPath("kubernetes.io/local-volume", "pv-2")
	iscsi := filepath.Join(l.PluginDir("kubernetes.io/iscsi"), "volumeDevices", "iface-default", "127.0.0.1:3260-iqn.x-lun-1")
	for _, f := range []string{filepath.Join(global, "u1"), filepath.Join(shared, "u1"), filepath.Join(shared, "u2"), filepath.Join(iscsi, "u1"), filepath.Join(iscsi, "iscsi.json")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := l.PodDeviceMapPath("u1", "kubernetes.io/local-volume")
	if err := os.MkdirAll(links, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(links, "pv-1")); err != nil {
		t.Fatal(err)
	}
	if torn, err := l.TearDownBlock("u1"); err != nil || !torn {
		t.Fatalf("teardown: %v %v", torn, err)
	}
	for _, gone := range []string{global, filepath.Join(shared, "u1"), filepath.Join(iscsi, "u1"), l.PodVolumeDevicesDir("u1")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(shared, "u2")); err != nil {
		t.Errorf("another pod's map: %v", err)
	}
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Errorf("the device itself: %v", err)
	}
	if torn, err := l.TearDownBlock("u1"); err != nil || torn {
		t.Errorf("again: %v %v", torn, err)
	}
}

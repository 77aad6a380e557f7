package volumes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Only the mount points at or below the root dir count, not a sibling
// sharing its prefix; the root dir's own mount is told from those below.
func TestMountsBelowRoot(t *testing.T) {
	root := "/var/lib/kubelet"
	got := below(root, []string{"/var/lib/kubelet2", "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount", "/var/lib/kubelet",
		"/var/lib/kubelet/plugins/kubernetes.io/csi/d/h/globalmount", "/var/lib/kubelet", "/var/lib"})
	want := []string{"/var/lib/kubelet", "/var/lib/kubelet/plugins/kubernetes.io/csi/d/h/globalmount", "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount"}
	if !slices.Equal(got, want) {
		t.Errorf("below: %v, want %v", got, want)
	}
	rootMounted, live := splitRoot(root, got)
	if !rootMounted || !slices.Equal(live, want[1:]) {
		t.Errorf("splitRoot: %v %v", rootMounted, live)
	}
	if rootMounted, live := splitRoot(root, nil); rootMounted || len(live) != 0 {
		t.Errorf("splitRoot of none: %v %v", rootMounted, live)
	}
}

// A root dir with nothing mounted below it goes, with all in it; a
// missing one is no error.
func TestRemoveRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "kubelet")
	if err := os.MkdirAll(filepath.Join(root, "pods", "u", "volumes"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cpu_manager_state"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	kept, err := NewLayout(root).RemoveRoot()
	if err != nil || kept {
		t.Fatalf("RemoveRoot: kept %v, %v", kept, err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the root dir stays: %v", err)
	}
	if kept, err := NewLayout(root).RemoveRoot(); err != nil || kept {
		t.Errorf("RemoveRoot again: kept %v, %v", kept, err)
	}
}

// A live mount below the root dir stops the removal: nothing is removed,
// what is mounted is named.
func TestRemoveRootRefusesLiveMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	root := filepath.Join(t.TempDir(), "kubelet")
	mnt := filepath.Join(root, "pods", "u", "volumes", "kubernetes.io~csi", "pv", "mount")
	if err := os.MkdirAll(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	data := filepath.Join(mnt, "data")
	if err := os.WriteFile(data, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := NewLayout(root).MountsBelow(); err != nil || !slices.Equal(got, []string{mnt}) {
		t.Errorf("MountsBelow: %v %v", got, err)
	}
	_, err := NewLayout(root).RemoveRoot()
	if err == nil || !strings.Contains(err.Error(), mnt) {
		t.Errorf("RemoveRoot: %v", err)
	}
	if _, err := os.Stat(data); err != nil {
		t.Errorf("the data under the mount: %v", err)
	}
}

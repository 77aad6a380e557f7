package volumes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
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

// hostlet's bind of the root dir onto itself is told from a filesystem
// mounted there, and from a bind of another directory.
func TestSelfBind(t *testing.T) {
	root := "/var/lib/kubelet"
	slash := &mountinfo.Info{ID: 1, Major: 8, Minor: 1, Root: "/", Mountpoint: "/"}
	varLib := &mountinfo.Info{ID: 2, Parent: 1, Major: 8, Minor: 2, Root: "/", Mountpoint: "/var/lib"}
	for _, c := range []struct {
		name   string
		mounts []*mountinfo.Info
		want   bool
	}{
		{"not a mount point", []*mountinfo.Info{slash}, false},
		{"bound onto itself", []*mountinfo.Info{slash, {ID: 3, Parent: 1, Major: 8, Minor: 1, Root: "/var/lib/kubelet", Mountpoint: root}}, true},
		{"bound onto itself, on a /var/lib of its own", []*mountinfo.Info{slash, varLib, {ID: 3, Parent: 2, Major: 8, Minor: 2, Root: "/kubelet", Mountpoint: root}}, true},
		{"another dir bound there", []*mountinfo.Info{slash, {ID: 3, Parent: 1, Major: 8, Minor: 1, Root: "/srv/kubelet", Mountpoint: root}}, false},
		{"a disk of its own", []*mountinfo.Info{slash, {ID: 3, Parent: 1, Major: 8, Minor: 3, Root: "/", Mountpoint: root}}, false},
		{"a disk stacked on the bind", []*mountinfo.Info{slash, {ID: 3, Parent: 1, Major: 8, Minor: 1, Root: "/var/lib/kubelet", Mountpoint: root},
			{ID: 4, Parent: 3, Major: 8, Minor: 3, Root: "/", Mountpoint: root}}, false},
	} {
		if got := selfBind(root, c.mounts); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A root dir bound onto itself (MakeShared) is unmounted and removed; one
// that is a filesystem of its own is emptied and kept.
func TestRemoveRootMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	bound := filepath.Join(t.TempDir(), "bound")
	if err := os.MkdirAll(filepath.Join(bound, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(bound, bound, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bound, unix.MNT_DETACH) })
	if kept, err := NewLayout(bound).RemoveRoot(); err != nil || kept {
		t.Errorf("RemoveRoot of a self-bound root: kept %v, %v", kept, err)
	}
	if _, err := os.Stat(bound); !os.IsNotExist(err) {
		t.Errorf("the self-bound root stays: %v", err)
	}
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", disk, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(disk, unix.MNT_DETACH) })
	if err := os.MkdirAll(filepath.Join(disk, "pods", "u"), 0o750); err != nil {
		t.Fatal(err)
	}
	if kept, err := NewLayout(disk).RemoveRoot(); err != nil || !kept {
		t.Errorf("RemoveRoot of a root of its own: kept %v, %v", kept, err)
	}
	if es, err := os.ReadDir(disk); err != nil || len(es) != 0 {
		t.Errorf("the root of its own after RemoveRoot: %v %v", es, err)
	}
}

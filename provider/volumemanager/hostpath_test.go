package volumemanager

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Every hostPath type is checked against what the path is, with the
// kubelet's messages (pkg/volume/hostpath checkTypeInternal): a socket, a
// character or block device, and an existing path of an *OrCreate type.
func TestSetupHostPathTypes(t *testing.T) {
	dir := t.TempDir()
	paths := map[v1.HostPathType]string{
		v1.HostPathDirectory: filepath.Join(dir, "adir"),
		v1.HostPathFile:      filepath.Join(dir, "afile"),
		v1.HostPathSocket:    filepath.Join(dir, "asocket"),
		v1.HostPathCharDev:   "/dev/null",
		v1.HostPathBlockDev:  filepath.Join(dir, "ablkdev"),
	}
	if err := os.Mkdir(paths[v1.HostPathDirectory], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths[v1.HostPathFile], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", paths[v1.HostPathSocket])
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A block device node (loop0's numbers); nothing opens it.
	if err := unix.Mknod(paths[v1.HostPathBlockDev], unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Logf("no block device node (%v): its cases are skipped", err)
		delete(paths, v1.HostPathBlockDev)
	}
	words := map[v1.HostPathType]string{
		v1.HostPathDirectory: "is not a directory",
		v1.HostPathFile:      "is not a file",
		v1.HostPathSocket:    "is not a socket file",
		v1.HostPathCharDev:   "is not a character device",
		v1.HostPathBlockDev:  "is not a block device",
	}
	check := func(typ v1.HostPathType, path, wantErr string) {
		t.Helper()
		err := setupHostPath(&v1.HostPathVolumeSource{Path: path, Type: &typ})
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s %s: %v", typ, path, err)
		case wantErr != "" && (err == nil || err.Error() != "hostPath type check failed: "+path+" "+wantErr):
			t.Errorf("%s %s: err = %v, want %q", typ, path, err, wantErr)
		}
	}
	for typ := range words {
		for have, path := range paths {
			want := ""
			if have != typ {
				want = words[typ]
			}
			check(typ, path, want)
			check(v1.HostPathUnset, path, "")
		}
		if _, ok := paths[typ]; ok {
			check(typ, filepath.Join(dir, "does-not-exist"), words[typ])
		}
	}
	// *OrCreate check what exists as their plain type does.
	check(v1.HostPathDirectoryOrCreate, paths[v1.HostPathFile], words[v1.HostPathDirectory])
	check(v1.HostPathFileOrCreate, paths[v1.HostPathDirectory], words[v1.HostPathFile])
	check(v1.HostPathDirectoryOrCreate, paths[v1.HostPathDirectory], "")
	check(v1.HostPathFileOrCreate, paths[v1.HostPathFile], "")
	check(v1.HostPathDirectoryOrCreate, filepath.Join(dir, "new", "dir"), "")
	if fi, err := os.Stat(filepath.Join(dir, "new", "dir")); err != nil || !fi.IsDir() {
		t.Errorf("DirectoryOrCreate made no directory: %v", err)
	}
	bad := v1.HostPathType("Pipe")
	if err := setupHostPath(&v1.HostPathVolumeSource{Path: dir, Type: &bad}); err == nil || !strings.Contains(err.Error(), "Pipe is an invalid volume type") {
		t.Errorf("type Pipe: %v", err)
	}
}

// DirectoryOrCreate and FileOrCreate make nothing through a dangling link.
func TestCreateHostPathNoFollow(t *testing.T) {
	base, bait := t.TempDir(), t.TempDir()
	mustOK(t, os.Symlink(filepath.Join(bait, "made"), filepath.Join(base, "dangling")))
	for _, tc := range []struct {
		path string
		dir  bool
	}{{"dangling", false}, {"dangling", true}, {"dangling/x", true}, {"dangling/x", false}} {
		if err := createHostPath(filepath.Join(base, tc.path), tc.dir); err == nil {
			t.Errorf("%s (dir %v) created", tc.path, tc.dir)
		}
		if entries, _ := os.ReadDir(bait); len(entries) != 0 {
			t.Fatalf("made through the link: %v", entries)
		}
	}
	mustOK(t, createHostPath(filepath.Join(base, "a", "b", "c"), true))
	mustOK(t, createHostPath(filepath.Join(base, "a", "b", "c"), true))
	mustOK(t, createHostPath(filepath.Join(base, "a", "f"), false))
	if fi, err := os.Lstat(filepath.Join(base, "a", "f")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("file: %v %v", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(base, "a", "b", "c")); err != nil || !fi.IsDir() {
		t.Errorf("dir: %v %v", fi, err)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

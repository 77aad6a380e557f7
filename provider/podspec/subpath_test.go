package podspec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// subPathFixture is a translation over a temp root dir with a pod that has an
// emptyDir "d", a hostPath "h" and a configMap "cm" volume, and a bait dir
// outside all of them. The pod's mounts are torn down before the temp dirs
// are removed.
type subPathFixture struct {
	r         *Runtime
	pod       *v1.Pod
	vol, host string
	bait      string
}

func newSubPathFixture(t *testing.T) *subPathFixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for bind mounts")
	}
	f := &subPathFixture{bait: t.TempDir(), host: t.TempDir()}
	root := t.TempDir()
	f.r = &Runtime{cfg: Config{RootDir: root}}
	f.pod = &v1.Pod{}
	f.pod.Name, f.pod.Namespace, f.pod.UID = "p", "ns", types.UID("uid1")
	f.pod.Spec.Volumes = []v1.Volume{
		{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: f.host}}},
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}
	f.vol = f.r.volumeDir(f.pod, "d")
	must(t, os.MkdirAll(f.vol, 0o777))
	must(t, os.Chmod(f.vol, 0o777))
	must(t, os.WriteFile(filepath.Join(f.bait, "secret"), []byte("bait"), 0o600))
	must(t, os.WriteFile(filepath.Join(f.host, "keep"), []byte("host data"), 0o644))
	t.Cleanup(func() {
		if err := f.r.teardownVolumes(string(f.pod.UID)); err != nil {
			t.Error(err)
		}
	})
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mount mounts volume vol with subPath sub into container "app" and returns
// the host path handed to the runtime.
func (f *subPathFixture) mount(vol, sub string) (string, error) {
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: vol, MountPath: "/m", SubPath: sub}}}
	ms, err := f.r.containerMounts(context.Background(), f.pod, c, nil, nil)
	if err != nil {
		return "", err
	}
	return ms[0].HostPath, nil
}

// checkBait: the bait dir holds exactly its one file, unchanged.
func (f *subPathFixture) checkBait(t *testing.T) {
	t.Helper()
	entries, _ := os.ReadDir(f.bait)
	if len(entries) != 1 {
		t.Errorf("bait dir has %d entries", len(entries))
	}
	if b, err := os.ReadFile(filepath.Join(f.bait, "secret")); err != nil || string(b) != "bait" {
		t.Errorf("bait changed: %q %v", b, err)
	}
}

// Every way out of the volume through a symlink is refused with the
// kubelet's message, and nothing is read or made outside.
func TestSubPathSymlinkEscapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(f *subPathFixture)
		sub   string
	}{
		{"absolute link", func(f *subPathFixture) { os.Symlink(f.bait, filepath.Join(f.vol, "x")) }, "x"},
		{"link to host root", func(f *subPathFixture) { os.Symlink("/", filepath.Join(f.vol, "x")) }, "x"},
		{"through a link", func(f *subPathFixture) { os.Symlink(f.bait, filepath.Join(f.vol, "x")) }, "x/secret"},
		{"link to a file", func(f *subPathFixture) { os.Symlink(filepath.Join(f.bait, "secret"), filepath.Join(f.vol, "x")) }, "x"},
		{"dotdot link", func(f *subPathFixture) {
			os.MkdirAll(filepath.Join(f.vol, "a"), 0o777)
			rel, _ := filepath.Rel(filepath.Join(f.vol, "a"), f.bait)
			os.Symlink(rel, filepath.Join(f.vol, "a", "b"))
		}, "a/b"},
		{"deep component", func(f *subPathFixture) {
			os.MkdirAll(filepath.Join(f.vol, "a", "b"), 0o777)
			os.Symlink("../../..", filepath.Join(f.vol, "a", "b", "c"))
		}, "a/b/c/d"},
		{"dangling link out (mkdir)", func(f *subPathFixture) { os.Symlink(filepath.Join(f.bait, "new"), filepath.Join(f.vol, "x")) }, "x"},
		{"create through a link", func(f *subPathFixture) { os.Symlink(f.bait, filepath.Join(f.vol, "x")) }, "x/new/deeper"},
		{"link loop", func(f *subPathFixture) {
			os.Symlink("y", filepath.Join(f.vol, "x"))
			os.Symlink("x", filepath.Join(f.vol, "y"))
		}, "x"},
	} {
		for _, emulated := range []bool{false, true} {
			name := tc.name
			if emulated {
				name += " (no openat2)"
			}
			t.Run(name, func(t *testing.T) {
				openat2Missing.Store(emulated)
				defer openat2Missing.Store(false)
				f := newSubPathFixture(t)
				tc.plant(f)
				host, err := f.mount("d", tc.sub)
				f.checkBait(t)
				if err == nil {
					// Without openat2 a link is resolved as in a chroot of the
					// volume: allowed only when it stays inside.
					var st, bst unix.Stat_t
					unix.Stat(host, &st)
					unix.Stat(f.bait, &bst)
					if !emulated || st.Ino == bst.Ino || !strings.HasPrefix(host, f.r.cfg.RootDir) {
						t.Fatalf("subPath %q accepted: %s", tc.sub, host)
					}
					t.Logf("scoped to the volume: %s", host)
					return
				}
				want1 := `failed to prepare subPath for volumeMount "d" of container "app"`
				want2 := `failed to create subPath directory for volumeMount "d" of container "app"`
				if err.Error() != want1 && err.Error() != want2 {
					t.Errorf("error %q", err)
				}
			})
		}
	}
}

// Links that stay inside the volume, files, new directories, hostPath and
// content volumes all work, bound through a per-pod path.
func TestSubPathInsideVolume(t *testing.T) {
	f := newSubPathFixture(t)
	must(t, os.MkdirAll(filepath.Join(f.vol, "real", "deep"), 0o777))
	must(t, os.WriteFile(filepath.Join(f.vol, "real", "deep", "file"), []byte("data"), 0o644))
	must(t, os.Symlink("real/deep", filepath.Join(f.vol, "rel")))
	must(t, os.MkdirAll(filepath.Join(f.vol, "other"), 0o777))
	must(t, os.Symlink("../real", filepath.Join(f.vol, "other", "up")))

	for sub, want := range map[string]string{"rel": "file", "other/up/deep": "file", "real/deep/file": "data"} {
		host, err := f.mount("d", sub)
		if err != nil {
			t.Fatalf("%s: %v", sub, err)
		}
		if want1 := f.r.subPathTarget(f.pod, "d", "app", 0); host != want1 {
			t.Errorf("%s bound at %s, want %s", sub, host, want1)
		}
		fi, _ := os.Stat(host)
		if fi.IsDir() {
			if _, err := os.Stat(filepath.Join(host, want)); err != nil {
				t.Errorf("%s: %v", sub, err)
			}
		} else if b, _ := os.ReadFile(host); string(b) != want {
			t.Errorf("%s reads %q", sub, b)
		}
	}

	// A missing subPath is made as directories with the volume's mode.
	host, err := f.mount("d", "new/dir")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"new", "new/dir"} {
		if fi, err := os.Stat(filepath.Join(f.vol, d)); err != nil || fi.Mode().Perm() != 0o777 {
			t.Errorf("%s: %v %v", d, fi.Mode(), err)
		}
	}
	must(t, os.WriteFile(filepath.Join(host, "via-bind"), nil, 0o644))
	if _, err := os.Stat(filepath.Join(f.vol, "new", "dir", "via-bind")); err != nil {
		t.Error("bind does not show the volume's directory")
	}

	// hostPath subPath; teardown must not reach through the bind.
	if host, err = f.mount("h", "sub"); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(host, "x"), []byte("x"), 0o644))
	must(t, f.r.teardownVolumes(string(f.pod.UID)))
	if _, err := os.Stat(filepath.Join(f.host, "sub", "x")); err != nil {
		t.Errorf("teardown removed hostPath data: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.host, "keep")); err != nil {
		t.Errorf("teardown removed hostPath data: %v", err)
	}
	if _, err := os.Stat(f.r.layout().PodDir("uid1")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}

// A subPath of a content volume shows the current payload through ..data,
// and content volumes are read-only whatever the mount says.
func TestSubPathContentVolume(t *testing.T) {
	f := newSubPathFixture(t)
	dir := f.r.volumeDir(f.pod, "cm")
	if _, err := writeAtomic(dir, map[string]volumeFile{"k": {Data: []byte("v1"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := writeAtomic(dir, map[string]volumeFile{"k": {Data: []byte("v2"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "cm", MountPath: "/whole"}, {Name: "cm", MountPath: "/k", SubPath: "k"}, {Name: "d", MountPath: "/d"}}}
	ms, err := f.r.containerMounts(context.Background(), f.pod, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(ms[1].HostPath); string(b) != "v2" {
		t.Errorf("subPath of the configMap reads %q", b)
	}
	if !ms[0].ReadOnly || !ms[1].ReadOnly || ms[2].ReadOnly {
		t.Errorf("read-only: %+v", ms)
	}
}

// subPathExpr goes the same safe way.
func TestSubPathExprEscape(t *testing.T) {
	f := newSubPathFixture(t)
	must(t, os.Symlink(f.bait, filepath.Join(f.vol, "evil")))
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "d", MountPath: "/m", SubPathExpr: "$(WHERE)"}}}
	if _, err := f.r.containerMounts(context.Background(), f.pod, c, []string{"WHERE=evil"}, nil); err == nil {
		t.Fatal("subPathExpr through a link accepted")
	}
	f.checkBait(t)
}

// DirectoryOrCreate and FileOrCreate make nothing through a dangling link.
func TestCreateHostPathNoFollow(t *testing.T) {
	base, bait := t.TempDir(), t.TempDir()
	must(t, os.Symlink(filepath.Join(bait, "made"), filepath.Join(base, "dangling")))
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
	must(t, createHostPath(filepath.Join(base, "a", "b", "c"), true))
	must(t, createHostPath(filepath.Join(base, "a", "b", "c"), true))
	must(t, createHostPath(filepath.Join(base, "a", "f"), false))
	if fi, err := os.Lstat(filepath.Join(base, "a", "f")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("file: %v %v", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(base, "a", "b", "c")); err != nil || !fi.IsDir() {
		t.Errorf("dir: %v %v", fi, err)
	}
}

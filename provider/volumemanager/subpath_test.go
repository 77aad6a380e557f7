package volumemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// subPathFixture is a volume manager over a temp root dir with a pod that has an
// emptyDir "d", a hostPath "h" and a configMap "cm" volume, and a bait dir
// outside all of them. The pod's mounts are torn down before the temp dirs
// are removed.
type subPathFixture struct {
	m         *Manager
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
	f.m = New(Config{RootDir: root})
	f.pod = &v1.Pod{}
	f.pod.Name, f.pod.Namespace, f.pod.UID = "p", "ns", types.UID("uid1")
	f.pod.Spec.Volumes = []v1.Volume{
		{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: f.host}}},
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}
	f.vol = f.m.VolumeDir(f.pod, "d")
	mustOK(t, os.MkdirAll(f.vol, 0o777))
	mustOK(t, os.Chmod(f.vol, 0o777))
	mustOK(t, os.WriteFile(filepath.Join(f.bait, "secret"), []byte("bait"), 0o600))
	mustOK(t, os.WriteFile(filepath.Join(f.host, "keep"), []byte("host data"), 0o644))
	t.Cleanup(func() {
		if err := f.m.TearDownPod(context.Background(), f.pod.UID); err != nil {
			t.Error(err)
		}
	})
	return f
}

// mount mounts volume vol with subPath sub into container "app" and returns
// the host path handed to the runtime.
func (f *subPathFixture) mount(vol, sub string) (string, error) {
	for i := range f.pod.Spec.Volumes {
		if v := &f.pod.Spec.Volumes[i]; v.Name == vol {
			host, _, err := f.m.MountSource(f.pod, v)
			if err != nil {
				return "", err
			}
			return f.m.PrepareSubPath(f.pod, "app", 0, v1.VolumeMount{Name: vol, MountPath: "/m", SubPath: sub}, host, sub)
		}
	}
	return "", fmt.Errorf("no volume %s", vol)
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
					if !emulated || st.Ino == bst.Ino || !strings.HasPrefix(host, f.m.cfg.RootDir) {
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
	mustOK(t, os.MkdirAll(filepath.Join(f.vol, "real", "deep"), 0o777))
	mustOK(t, os.WriteFile(filepath.Join(f.vol, "real", "deep", "file"), []byte("data"), 0o644))
	mustOK(t, os.Symlink("real/deep", filepath.Join(f.vol, "rel")))
	mustOK(t, os.MkdirAll(filepath.Join(f.vol, "other"), 0o777))
	mustOK(t, os.Symlink("../real", filepath.Join(f.vol, "other", "up")))

	for sub, want := range map[string]string{"rel": "file", "other/up/deep": "file", "real/deep/file": "data"} {
		host, err := f.mount("d", sub)
		if err != nil {
			t.Fatalf("%s: %v", sub, err)
		}
		if want1 := f.m.layout.SubPathTarget(f.pod.UID, "d", "app", 0); host != want1 {
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
	mustOK(t, os.WriteFile(filepath.Join(host, "via-bind"), nil, 0o644))
	if _, err := os.Stat(filepath.Join(f.vol, "new", "dir", "via-bind")); err != nil {
		t.Error("bind does not show the volume's directory")
	}

	// hostPath subPath; teardown must not reach through the bind.
	if host, err = f.mount("h", "sub"); err != nil {
		t.Fatal(err)
	}
	mustOK(t, os.WriteFile(filepath.Join(host, "x"), []byte("x"), 0o644))
	mustOK(t, f.m.TearDownPod(context.Background(), f.pod.UID))
	if _, err := os.Stat(filepath.Join(f.host, "sub", "x")); err != nil {
		t.Errorf("teardown removed hostPath data: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.host, "keep")); err != nil {
		t.Errorf("teardown removed hostPath data: %v", err)
	}
	if _, err := os.Stat(f.m.layout.PodDir("uid1")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}

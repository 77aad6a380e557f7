package podspec

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
	f.r = New(Config{RootDir: root})
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

// A subPath of a content volume shows the current payload through ..data,
// and content volumes are read-only whatever the mount says.
func TestSubPathContentVolume(t *testing.T) {
	f := newSubPathFixture(t)
	dir := f.r.volumeDir(f.pod, "cm")
	for _, v := range []string{"v1", "v2"} {
		must(t, f.r.volumes.SetUpPod(context.Background(), f.pod, func(context.Context, *v1.Volume) (map[string]volumeFile, error) {
			return map[string]volumeFile{"k": {Data: []byte(v), Mode: 0o644}}, nil
		}))
	}
	if _, err := os.Lstat(filepath.Join(dir, "..data")); err != nil {
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

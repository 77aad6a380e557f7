package podspec

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// mountsFixture is a translation over a temp root dir with a pod of an
// emptyDir "d" and a configMap "cm" (subPaths themselves are the volume
// manager's tests: they go through containerMounts here), torn down at the
// end.
func mountsFixture(t *testing.T) (*Runtime, *v1.Pod) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for bind mounts")
	}
	r := New(Config{RootDir: t.TempDir()})
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "p", "ns", types.UID("uid1")
	pod.Spec.Volumes = []v1.Volume{
		{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}
	t.Cleanup(func() { must(t, r.teardownVolumes(string(pod.UID))) })
	return r, pod
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A subPath of a content volume shows the current payload through ..data,
// and content volumes are read-only whatever the mount says.
func TestSubPathContentVolume(t *testing.T) {
	r, pod := mountsFixture(t)
	dir := r.volumeDir(pod, "cm")
	for _, v := range []string{"v1", "v2"} {
		must(t, r.volumes.SetUpPod(context.Background(), pod, func(context.Context, *v1.Volume) (map[string]volumeFile, error) {
			return map[string]volumeFile{"k": {Data: []byte(v), Mode: 0o644}}, nil
		}))
	}
	if _, err := os.Lstat(filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "cm", MountPath: "/whole"}, {Name: "cm", MountPath: "/k", SubPath: "k"}, {Name: "d", MountPath: "/d"}}}
	ms, err := r.containerMounts(context.Background(), pod, c, nil, nil)
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
	r, pod := mountsFixture(t)
	bait := t.TempDir()
	must(t, r.volumes.SetUpPod(context.Background(), pod, func(context.Context, *v1.Volume) (map[string]volumeFile, error) { return nil, nil }))
	must(t, os.Symlink(bait, filepath.Join(r.volumeDir(pod, "d"), "evil")))
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "d", MountPath: "/m", SubPathExpr: "$(WHERE)"}}}
	if _, err := r.containerMounts(context.Background(), pod, c, []string{"WHERE=evil"}, nil); err == nil {
		t.Fatal("subPathExpr through a link accepted")
	}
	if entries, _ := os.ReadDir(bait); len(entries) != 0 {
		t.Errorf("made in the bait dir: %v", entries)
	}
}

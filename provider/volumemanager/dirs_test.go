package volumemanager

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An inline volume's directory is its plugin's, as the kubelet's.
func TestVolumeDirIsTheKubelets(t *testing.T) {
	d := NewDirs("/var/lib/kubelet")
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
	}}}
	for _, c := range []struct{ got, want string }{
		{d.VolumeDir(pod, "data"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/data"},
		{d.VolumeDir(pod, "cfg"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg"},
		{d.VolumeDir(pod, "tok"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~projected/tok"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

// A pod a hostlet of before the kubelet's layout set up keeps its
// volumes where its containers have them mounted.
func TestVolumeDirOfAnOlderHostlet(t *testing.T) {
	root := t.TempDir()
	l := NewDirs(root)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "old", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "new", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}}}
	old := filepath.Join(root, "pods", "u1", "volumes", "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := l.VolumeDir(pod, "old"); got != old {
		t.Errorf("volume of an older hostlet at %s, want %s", got, old)
	}
	if got, want := l.VolumeDir(pod, "new"), filepath.Join(root, "pods", "u1", "volumes", "kubernetes.io~empty-dir", "new"); got != want {
		t.Errorf("new volume at %s, want %s", got, want)
	}
}

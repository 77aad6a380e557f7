package volumes

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The paths are the kubelet's, which DaemonSets mounting its root dir and
// tests on the host read.
func TestLayoutIsTheKubelets(t *testing.T) {
	l := NewLayout("/var/lib/kubelet")
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
	}}}
	for _, c := range []struct{ got, want string }{
		{l.PodsDir(), "/var/lib/kubelet/pods"},
		{l.PodDir("u1"), "/var/lib/kubelet/pods/u1"},
		{l.PodVolumesDir("u1"), "/var/lib/kubelet/pods/u1/volumes"},
		{l.PodVolumeDir("u1", "kubernetes.io/local-volume", "pv-1"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~local-volume/pv-1"},
		{l.VolumeDir(pod, "data"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/data"},
		{l.VolumeDir(pod, "cfg"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg"},
		{l.VolumeDir(pod, "tok"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~projected/tok"},
		{l.PodSubPathsDir("u1"), "/var/lib/kubelet/pods/u1/volume-subpaths"},
		{l.SubPathTarget("u1", "data", "app", 2), "/var/lib/kubelet/pods/u1/volume-subpaths/data/app/2"},
		{l.PluginDir("kubernetes.io/csi"), "/var/lib/kubelet/plugins/kubernetes.io/csi"},
		{l.PluginsRegistryDir(), "/var/lib/kubelet/plugins_registry"},
		// The local volume plugin's block paths (its GetGlobalMapPath and
		// GetPodDeviceMapPath).
		{l.GlobalMapPath("kubernetes.io/local-volume", "pv-1"), "/var/lib/kubelet/plugins/kubernetes.io~local-volume/volumeDevices/pv-1"},
		{l.PodVolumeDevicesDir("u1"), "/var/lib/kubelet/pods/u1/volumeDevices"},
		{l.PodDeviceMapPath("u1", "kubernetes.io/local-volume"), "/var/lib/kubelet/pods/u1/volumeDevices/kubernetes.io~local-volume"},
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
	l := NewLayout(root)
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

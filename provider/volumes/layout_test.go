package volumes

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The paths are the kubelet's, which DaemonSets mounting its root dir and
// tests on the host read.
func TestLayoutIsTheKubelets(t *testing.T) {
	l := NewLayout("/var/lib/kubelet")
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	for _, c := range []struct{ got, want string }{
		{l.PodsDir(), "/var/lib/kubelet/pods"},
		{l.PodDir("u1"), "/var/lib/kubelet/pods/u1"},
		{l.PodVolumesDir("u1"), "/var/lib/kubelet/pods/u1/volumes"},
		{l.PodVolumeDir("u1", "data"), "/var/lib/kubelet/pods/u1/volumes/data"},
		{l.VolumeDir(pod, "data"), "/var/lib/kubelet/pods/u1/volumes/data"},
		{l.PodSubPathsDir("u1"), "/var/lib/kubelet/pods/u1/volume-subpaths"},
		{l.SubPathTarget("u1", "data", "app", 2), "/var/lib/kubelet/pods/u1/volume-subpaths/data/app/2"},
		{l.PluginDir("kubernetes.io/csi"), "/var/lib/kubelet/plugins/kubernetes.io/csi"},
		{l.PluginsRegistryDir(), "/var/lib/kubelet/plugins_registry"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

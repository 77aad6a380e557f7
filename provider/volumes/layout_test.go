package volumes

import (
	"testing"
)

// The paths are the kubelet's, which DaemonSets mounting its root dir and
// tests on the host read.
func TestLayoutIsTheKubelets(t *testing.T) {
	l := NewLayout("/var/lib/kubelet")
	for _, c := range []struct{ got, want string }{
		{l.PodsDir(), "/var/lib/kubelet/pods"},
		{l.PodDir("u1"), "/var/lib/kubelet/pods/u1"},
		{l.PodVolumesDir("u1"), "/var/lib/kubelet/pods/u1/volumes"},
		{l.PodVolumeDir("u1", "kubernetes.io/local-volume", "pv-1"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~local-volume/pv-1"},
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

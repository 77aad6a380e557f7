package volumemanager

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestLocalEphemeralAndStats(t *testing.T) {
	for _, c := range []struct {
		name          string
		src           v1.VolumeSource
		local, report bool
	}{
		{"emptyDir", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}, true, true},
		{"memory emptyDir", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}, false, true},
		{"hugepages emptyDir", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumHugePages}}, false, true},
		{"configMap", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}, true, true},
		{"gitRepo", v1.VolumeSource{GitRepo: &v1.GitRepoVolumeSource{}}, true, false},
		{"secret", v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}, false, true},
		{"downwardAPI", v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}, false, true},
		{"projected", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}, false, true},
		{"hostPath", v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}, false, false},
		{"pvc", v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}, false, false},
		{"image", v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "busybox"}}, false, false},
	} {
		v := v1.Volume{Name: "v", VolumeSource: c.src}
		if got := IsLocalEphemeral(v); got != c.local {
			t.Errorf("%s: IsLocalEphemeral %v, want %v", c.name, got, c.local)
		}
		if got := HasStats(v); got != c.report {
			t.Errorf("%s: HasStats %v, want %v", c.name, got, c.report)
		}
	}
}

// The plugins' names are the kubelet's: their directories in a pod's
// volumes are found by what reads the kubelet's.
func TestPluginName(t *testing.T) {
	for _, c := range []struct {
		src  v1.VolumeSource
		want string
	}{
		{v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}, "kubernetes.io/empty-dir"},
		{v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}, "kubernetes.io/configmap"},
		{v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}, "kubernetes.io/secret"},
		{v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}, "kubernetes.io/downward-api"},
		{v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}, "kubernetes.io/projected"},
		{v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{}}, "kubernetes.io/host-path"},
		{v1.VolumeSource{Image: &v1.ImageVolumeSource{}}, "kubernetes.io/image"},
		{v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}, ""},
	} {
		if got := PluginName(&c.src); got != c.want {
			t.Errorf("%+v: %q, want %q", c.src, got, c.want)
		}
	}
}

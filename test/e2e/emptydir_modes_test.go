package e2e

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A memory-backed emptyDir's root is a tmpfs of mode 1777, sticky as the
// kubelet leaves it, with the fsGroup's setgid bit on top; a missing subPath
// made in it copies that mode (upstream's "EmptyDir volumes when FSGroup is
// specified nonexistent volume subPath should have the correct mode and
// owner using FSGroup"). The default medium's root is 0777 without sticky.
func TestEmptyDirRootModes(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	uid, fsGroup := int64(1001), int64(123)
	pod := busybox(ns, "modes", "sleep", "3600")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: &uid, FSGroup: &fsGroup}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	sub := mount("mem", "/sub")
	sub.SubPath = "test-sub"
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("mem", "/mem"), sub, mount("disk", "/disk")}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	for path, want := range map[string]string{
		"/mem":  "drwxrwsrwt 0:123",
		"/sub":  "drwxrwsrwt 0:123",
		"/disk": "drwxrwsrwx 0:123",
	} {
		if got := execIn(t, ns, pod.Name, "c", "stat", "-c", "%A %u:%g", path); got != want+"\n" {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// An nfs volume the host cannot mount (this machine's kernel has no NFS
// client; make hosttest mounts real exports in its VM) keeps the pod
// Pending with the kubelet's FailedMount: the mount command, its arguments
// and its output; the pod is deleted with nothing left of the volume.
func TestNFSMountFailure(t *testing.T) {
	skipIfNoCluster(t)
	if _, err := os.Stat("/proc/fs/nfs"); err == nil {
		t.Skip("the kernel has an NFS client: the mount could reach a server")
	}
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "nfs", "sleep", "3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "share", VolumeSource: v1.VolumeSource{
		NFS: &v1.NFSVolumeSource{Server: "127.0.0.1", Path: "/exports/none"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("share", "/share")}
	created := cluster.CreatePod(t, pod)
	var msg string
	awaitEvent(t, ns, pod.Name, func(reason, m string) bool {
		msg = m
		return reason == "FailedMount" && strings.Contains(m, "share")
	})
	dir := filepath.Join(node.RootDir(), "pods", string(created.UID), "volumes", "kubernetes.io~nfs", "share")
	want := `MountVolume.SetUp failed for volume "share" : mount failed: exit status 32
Mounting command: mount
Mounting arguments: -t nfs 127.0.0.1:/exports/none ` + dir + "\nOutput: "
	if !strings.HasPrefix(msg, want) {
		t.Errorf("FailedMount %q, want it to start with %q", msg, want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the failed mount left %s: %v", dir, err)
	}
	removePod(t, ns, pod.Name)
	pollUntil(t, 30*time.Second, "the pod's directory removed", func() bool {
		_, err := os.Stat(filepath.Join(node.RootDir(), "pods", string(created.UID)))
		return os.IsNotExist(err)
	})
}

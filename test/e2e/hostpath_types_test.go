package e2e

import (
	"net"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A hostPath volume's type is checked against what the path is, as the
// kubelet's hostPath plugin does for every type (upstream's HostPathType
// specs): a pod naming a socket, character device or block device that
// the path is not stays Pending with the kubelet's FailedMount message; one
// whose path is what it names runs.
func TestHostPathTypeChecks(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "asocket")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	pod := func(name, path string, typ v1.HostPathType) *v1.Pod {
		p := busybox(ns, name, "sleep", "3600")
		p.Spec.Volumes = []v1.Volume{{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path, Type: &typ}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("h", "/mnt/test")}
		cluster.CreatePod(t, p)
		return p
	}
	for _, c := range []struct {
		name, path string
		typ        v1.HostPathType
		want       string
	}{
		{"dir-as-socket", dir, v1.HostPathSocket, dir + " is not a socket file"},
		{"socket-as-chardev", sock, v1.HostPathCharDev, sock + " is not a character device"},
		{"chardev-as-blockdev", "/dev/null", v1.HostPathBlockDev, "/dev/null is not a block device"},
	} {
		p := pod(c.name, c.path, c.typ)
		if msg, want := waitEvent(t, ns, p.Name, "FailedMount"), `MountVolume.SetUp failed for volume "h" : hostPath type check failed: `+c.want; msg != want {
			t.Errorf("%s: FailedMount %q, want %q", c.name, msg, want)
		}
		got, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1.PodPending {
			t.Errorf("%s: phase %s after the FailedMount, want Pending", c.name, got.Status.Phase)
		}
	}
	for _, c := range []struct {
		name, path string
		typ        v1.HostPathType
	}{
		{"socket", sock, v1.HostPathSocket},
		{"chardev", "/dev/null", v1.HostPathCharDev},
	} {
		p := pod(c.name, c.path, c.typ)
		waitPhase(t, ns, p.Name, v1.PodRunning)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tmpfsVolumesPod has the volumes hostlet mounts itself: a secret, a
// projected volume (secret and downward API) and a memory emptyDir (each a
// tmpfs), and subPath binds of two of them.
func tmpfsVolumesPod(ns, name string) *v1.Pod {
	pod := busybox(ns, name, "sh", "-c", "echo x > /mem/sub/f; sleep 3600")
	pod.Spec.AutomountServiceAccountToken = ptr(false)
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(1))
	pod.Spec.Volumes = []v1.Volume{
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		}}}},
		{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
	}
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: pod.Spec.Containers[0].Image,
		Command: []string{"mkdir", "-p", "/mem/sub"}, VolumeMounts: []v1.VolumeMount{mount("mem", "/mem")}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("sec", "/sec"), mount("proj", "/proj"), mount("mem", "/mem"),
		{Name: "mem", MountPath: "/sub", SubPath: "sub"}, {Name: "sec", MountPath: "/key", SubPath: "key"}}
	return pod
}

// After hostlet is killed -9 and restarted with them mounted, the tmpfs
// volumes (secret, projected, memory emptyDir) and subPath binds of a pod
// are unmounted and its directory removed when the pod is deleted later
// (its worker reconstructs it), and so are those of a pod force-deleted
// while hostlet was down (the sweep finds it).
func TestRestartTearsDownVolumes(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	if _, err := cluster.Client().CoreV1().Secrets(ns).Create(ctxT(t), &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		StringData: map[string]string{"key": "value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.CreatePod(t, tmpfsVolumesPod(ns, "later"))
	cluster.CreatePod(t, tmpfsVolumesPod(ns, "forced"))
	later, forced := waitReady(t, ns, "later"), waitReady(t, ns, "forced")
	for _, p := range []*v1.Pod{later, forced} {
		// 3 tmpfs volumes and 2 subPath binds at least.
		if m := podMounts(t, p.UID); len(m) < 5 {
			t.Fatalf("%s: %d mounts under its directory before the restart, want at least 5", p.Name, len(m))
		}
	}

	node.Kill()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "forced", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "forced")
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if out := execIn(t, ns, "later", "c", "cat", "/key", "/sub/f", "/proj/name"); out != "valuex\nlater" {
		t.Errorf("after the restart the pod reads %q", out)
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "later")
	// The deletion waits for the teardown: nothing is left at once.
	laterDir := filepath.Join(node.RootDir(), "pods", string(later.UID))
	if m := podMounts(t, later.UID); len(m) != 0 {
		t.Errorf("left mounted of the deleted pod: %v", m)
	}
	if _, err := os.Stat(laterDir); !os.IsNotExist(err) {
		t.Errorf("the deleted pod's directory is left: %v", err)
	}
	forcedDir := filepath.Join(node.RootDir(), "pods", string(forced.UID))
	pollUntil(t, time.Minute, "the force-deleted pod's volumes unmounted and its directory removed", func() bool {
		_, err := os.Stat(forcedDir)
		return len(podMounts(t, forced.UID)) == 0 && os.IsNotExist(err)
	})
}

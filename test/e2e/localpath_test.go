package e2e

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	"github.com/moby/sys/mountinfo"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deployLocalPathProvisioner builds local-path-provisioner (build.sh
// local-path-provisioner) and its image and installs it from
// testdata/local-path-storage.yaml, its README's manifest, with its volumes
// under base on the node; it is removed when the test ends.
func deployLocalPathProvisioner(t *testing.T, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	u, err := url.Parse(cluster.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	deployComponent(ctx, t, cluster, "local-path-provisioner", images.BuildLocalPathProvisioner, "testdata/local-path-storage.yaml", map[string]string{
		"APISERVER_HOST": host, "APISERVER_PORT": port, "NODE": nodeName, "BUSYBOX": images.BusyboxRef, "PATH_ON_NODE": base,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := cluster.Kubectl(ctx, "delete", "--ignore-not-found", "-f", filepath.Join(cluster.Dir(), "addon-local-path-storage.yaml")); err != nil {
			t.Logf("removing local-path-provisioner: %v\n%s", err, out)
		}
	})
	if out, err := cluster.Kubectl(ctx, "rollout", "status", "-n", "local-path-storage", "deployment/local-path-provisioner", "--timeout=3m"); err != nil {
		t.Fatalf("local-path-provisioner: %v\n%s\n%s", err, out, provisionerLogs(t))
	}
}

// provisionerLogs is the provisioner's whole log (its --debug one is a few
// lines per volume).
func provisionerLogs(t *testing.T) string {
	out, _ := cluster.Kubectl(ctxT(t), "logs", "-n", "local-path-storage", "deployment/local-path-provisioner")
	return out
}

// waitNewPod waits until pod ns/name is Ready with another UID than old.
func waitNewPod(t *testing.T, ns, name string, old types.UID) *v1.Pod {
	t.Helper()
	p, err := cluster.WaitForPod(ctxT(t), ns, name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		if p.UID == old || p.DeletionTimestamp != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never Ready again: %v", ns, name, err)
	}
	return p
}

// podMounts are the mount points in the pod's directory.
func podMounts(t *testing.T, uid types.UID) []string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(node.RootDir(), "pods", string(uid))))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return out
}

// noMountsLeft: nothing is mounted in the pod's directory any more.
func noMountsLeft(t *testing.T, uid types.UID) {
	t.Helper()
	pollUntil(t, time.Minute, "nothing mounted for pod "+string(uid), func() bool { return len(podMounts(t, uid)) == 0 })
}

// localMountedOnce: the local PV is mounted where the kubelet mounts it,
// once (a hostlet restarted does not mount it again).
func localMountedOnce(t *testing.T, uid types.UID, pv string) {
	t.Helper()
	target := filepath.Join(node.RootDir(), "pods", string(uid), "volumes", "kubernetes.io~local-volume", pv)
	n := 0
	for _, m := range podMounts(t, uid) {
		if m == target {
			n++
		}
	}
	if n != 1 {
		t.Errorf("local PV mounted %d times at %s; the pod's mounts: %q", n, target, podMounts(t, uid))
	}
}

// Rancher's local-path-provisioner, installed as its README installs it,
// provisions a StatefulSet's volumeClaimTemplates on the node through its
// helper pod (a hostPath PV, its default, and a local one, both with node
// affinity); what the pod writes is in the PVs' directories on the host
// and survives the pod deleted and made again, hostlet restarted and
// hostlet killed with -9 while the volumes are in use (the local PV still
// mounted once); nothing is left mounted once a pod is gone. Once the
// StatefulSet and the claims are deleted, the provisioner's teardown helper
// pod runs on the node and the directories and the PVs are gone.
func TestLocalPathProvisionerStatefulSet(t *testing.T) {
	skipIfNoCluster(t)
	base := t.TempDir()
	deployLocalPathProvisioner(t, base)
	ns := cluster.NewNamespace(t)
	apps := cluster.Client().AppsV1().StatefulSets(ns)
	labels := map[string]string{"app": "web"}
	class := "local-path"
	pod := busybox(ns, "", "sleep", "3600").Spec
	pod.RestartPolicy = v1.RestartPolicyAlways
	pod.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.NodeSelector = map[string]string{v1.LabelHostname: nodeName}
	pod.Containers[0].VolumeMounts = []v1.VolumeMount{mount("data", "/data"), mount("local", "/local")}
	template := func(name string, annotations map[string]string) v1.PersistentVolumeClaim {
		return v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("64Mi")}},
		}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr(int32(1)), ServiceName: "web",
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		// The default hostPath PV, and a local one (its README's volumeType
		// annotation), which hostlet bind-mounts in the pod's directory.
		VolumeClaimTemplates: []v1.PersistentVolumeClaim{template("data", nil), template("local", map[string]string{"volumeType": "local"})},
	}}
	if _, err := apps.Create(ctxT(t), sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := cluster.WaitForPod(ctxT(t), ns, "web-0", 3*time.Minute, func(p *v1.Pod) (bool, error) {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("web-0 never Ready: %v\n%s", err, provisionerLogs(t))
	}
	claims := []string{"data", "local"}
	pvs := map[string]string{} // claim template: PV
	dirs := map[string]string{}
	for _, claim := range claims {
		pvc, err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctxT(t), claim+"-web-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := cluster.Client().CoreV1().PersistentVolumes().Get(ctxT(t), pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch src := pv.Spec.PersistentVolumeSource; {
		case claim == "data" && src.HostPath != nil:
			dirs[claim] = src.HostPath.Path
		case claim == "local" && src.Local != nil:
			dirs[claim] = src.Local.Path
		}
		if filepath.Dir(dirs[claim]) != base {
			t.Fatalf("PV %s of %s: %+v, want a %s volume under %s", pv.Name, claim, pv.Spec.PersistentVolumeSource, claim, base)
		}
		pvs[claim] = pv.Name
		t.Logf("PV %s at %s", pv.Name, dirs[claim])
	}
	write := func(line string) {
		t.Helper()
		execIn(t, ns, "web-0", "c", "sh", "-c", "echo "+line+" >> /data/f && echo "+line+" >> /local/f")
	}
	read := func(want string) {
		t.Helper()
		for _, claim := range claims {
			if out := execIn(t, ns, "web-0", "c", "cat", "/"+claim+"/f"); out != want {
				t.Errorf("web-0 reads %q in /%s, want %q", out, claim, want)
			}
			if b, err := os.ReadFile(filepath.Join(dirs[claim], "f")); err != nil || string(b) != want {
				t.Errorf("the host reads %q %v in %s, want %q", b, err, dirs[claim], want)
			}
		}
	}
	localMountedOnce(t, first.UID, pvs["local"])
	write("one")
	read("one\n")

	// The pod deleted: the StatefulSet makes it again, with its data.
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := waitNewPod(t, ns, "web-0", first.UID)
	noMountsLeft(t, first.UID)
	read("one\n")
	write("two")

	// hostlet restarted, then killed, with the volume in use: the same
	// container runs on with its data.
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	read("one\ntwo\n")
	write("three")
	node.Kill()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	read("one\ntwo\nthree\n")
	localMountedOnce(t, second.UID, pvs["local"])
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "web-0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p.UID != second.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("web-0 after the restarts: uid %s (was %s), restarts %d", p.UID, second.UID, p.Status.ContainerStatuses[0].RestartCount)
	}

	// The StatefulSet and then its claim deleted: the provisioner's
	// teardown helper pod removes the directory, and the PV goes.
	if err := apps.Delete(ctxT(t), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "web-0")
	noMountsLeft(t, second.UID)
	for _, claim := range claims {
		if _, err := os.Stat(filepath.Join(dirs[claim], "f")); err != nil {
			t.Errorf("the data of %s went with the StatefulSet: %v", claim, err)
		}
		if err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Delete(ctxT(t), claim+"-web-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, claim := range claims {
		pollUntil(t, 3*time.Minute, "the PV of "+claim+" deleted by the provisioner", func() bool {
			_, err := cluster.Client().CoreV1().PersistentVolumes().Get(ctxT(t), pvs[claim], metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if _, err := os.Stat(dirs[claim]); !os.IsNotExist(err) {
			t.Errorf("%s after the PV's deletion: %v, want it gone", dirs[claim], err)
		}
		if logs := provisionerLogs(t); !strings.Contains(logs, "Volume "+pvs[claim]+" has been deleted on "+nodeName+":"+dirs[claim]) {
			t.Errorf("the provisioner's log does not say its helper pod deleted the volume of %s:\n%s", claim, logs)
		}
	}
}

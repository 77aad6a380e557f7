package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// persistentVolume creates a cluster-wide PV of 1Gi from src (deleted when
// the test ends) with the given class, Retain as static PVs are.
func persistentVolume(t *testing.T, name, class string, src v1.PersistentVolumeSource, affinity *v1.VolumeNodeAffinity) {
	t.Helper()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: src, StorageClassName: class, NodeAffinity: affinity,
		Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
	}}
	if _, err := cluster.Client().CoreV1().PersistentVolumes().Create(ctxT(t), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// claim creates a 1Gi ReadWriteOnce PVC of class in ns, for the PV
// volume if not "".
func claim(t *testing.T, ns, name, class, volume string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeClaimSpec{
		StorageClassName: &class, VolumeName: volume, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if _, err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctxT(t), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimPodSpec is a sleeping busybox mounting claim at /data (and again
// read-only at /ro).
func claimPodSpec(ns, name, claim string, readOnly bool) *v1.Pod {
	pod := busybox(ns, name, "sleep", "3600")
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("data", "/data"),
		{Name: "data", MountPath: "/ro", ReadOnly: true}}
	return pod
}

// removePod deletes the pod at once and waits until it is gone.
func removePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, name)
}

// writeFails: writing in the pod's dir fails as on a read-only mount.
func writeFails(t *testing.T, ns, pod, dir string) {
	t.Helper()
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "exec", pod, "-c", "c", "--", "sh", "-c", "echo x > "+dir+"/w")
	if err == nil || !strings.Contains(err.Error(), "Read-only file system") {
		t.Errorf("write to %s in %s: %q %v, want Read-only file system", dir, pod, out, err)
	}
}

// A pod whose claim does not exist waits with the kubelet's FailedMount
// event and starts once the claim is bound to a hostPath PV (made by the
// DirectoryOrCreate type); what it writes is on the PV's host path and is
// there for the same pod made again. A local PV with node affinity for the
// node, bound by the scheduler and the PV controller through a
// WaitForFirstConsumer class as local volumes are deployed, is
// bind-mounted where the kubelet mounts it and keeps its data across
// pods; readOnly on the claim makes it read-only. Once the pods are gone
// nothing is left mounted and the PVs' data is intact.
func TestPersistentVolumeClaimHostPathAndLocal(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()

	// hostPath: the pod comes before its claim.
	hostDir := filepath.Join(t.TempDir(), "made")
	pod := claimPodSpec(ns, "app", "data", false)
	pod.Spec.NodeName = nodeName // the scheduler would wait for the claim
	cluster.CreatePod(t, pod)
	var msg string
	awaitEvent(t, ns, pod.Name, func(reason, m string) bool {
		msg = m
		return reason == "FailedMount" && strings.Contains(m, "error processing PVC "+ns+"/data")
	})
	if want := "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC " + ns + "/data: "; !strings.HasPrefix(msg, want) {
		t.Errorf("FailedMount %q, want it to start with %q", msg, want)
	}
	t.Logf("FailedMount: %s", msg)
	pvHost := ns + "-host"
	persistentVolume(t, pvHost, "", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: hostDir, Type: ptr(v1.HostPathDirectoryOrCreate)}}, nil)
	claim(t, ns, "data", "", pvHost)
	waitReady(t, ns, pod.Name)
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo kept > /data/f")
	writeFails(t, ns, pod.Name, "/ro")
	if b, err := os.ReadFile(filepath.Join(hostDir, "f")); err != nil || string(b) != "kept\n" {
		t.Errorf("on the hostPath PV: %q %v", b, err)
	}
	removePod(t, ns, pod.Name)
	pod = claimPodSpec(ns, "app", "data", false)
	cluster.CreatePod(t, pod) // placed by the scheduler now that the claim is bound
	waitReady(t, ns, pod.Name)
	if out := execIn(t, ns, pod.Name, "c", "cat", "/data/f"); out != "kept\n" {
		t.Errorf("the pod made again reads %q", out)
	}
	removePod(t, ns, pod.Name)

	// local: a WaitForFirstConsumer class, as the local static provisioner's.
	localDir := t.TempDir()
	class := ns + "-local"
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cluster.Client().StorageV1().StorageClasses().Create(ctxT(t), &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().StorageV1().StorageClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	pvLocal := ns + "-local"
	persistentVolume(t, pvLocal, class, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: localDir}},
		&v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}})
	claim(t, ns, "local", class, "")
	pod = claimPodSpec(ns, "local", "local", false)
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)
	if running.Spec.NodeName != nodeName {
		t.Fatalf("pod on %q", running.Spec.NodeName)
	}
	if pvc, err := c.PersistentVolumeClaims(ns).Get(ctxT(t), "local", metav1.GetOptions{}); err != nil || pvc.Spec.VolumeName != pvLocal {
		t.Fatalf("claim bound to %v (%v), want %s", pvc.Spec.VolumeName, err, pvLocal)
	}
	target := filepath.Join(node.RootDir(), "pods", string(running.UID), "volumes", "kubernetes.io~local-volume", pvLocal)
	if ok, err := mountinfo.Mounted(target); err != nil || !ok {
		t.Errorf("local PV not mounted at %s: %v", target, err)
	}
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo local > /data/f")
	writeFails(t, ns, pod.Name, "/ro")
	removePod(t, ns, pod.Name)
	// hostlet cleans the host up just after the API object is gone (the
	// kubelet, just before).
	pollUntil(t, time.Minute, "the local PV unmounted once the pod is gone", func() bool {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(node.RootDir(), "pods", string(running.UID))))
		return err == nil && len(mounts) == 0
	})
	if b, err := os.ReadFile(filepath.Join(localDir, "f")); err != nil || string(b) != "local\n" {
		t.Errorf("on the local PV: %q %v", b, err)
	}
	// A pod with the claim read-only reads what the first wrote, and cannot
	// write.
	pod = claimPodSpec(ns, "viewer", "local", true)
	cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)
	if out := execIn(t, ns, pod.Name, "c", "cat", "/data/f"); out != "local\n" {
		t.Errorf("the next pod reads %q", out)
	}
	writeFails(t, ns, pod.Name, "/data")
	removePod(t, ns, pod.Name)
	if b, err := os.ReadFile(filepath.Join(localDir, "f")); err != nil || string(b) != "local\n" {
		t.Errorf("on the local PV after the pods: %q %v", b, err)
	}
}

// A generic ephemeral volume: the ephemeral volume controller makes the
// pod's claim, <pod>-<volume>, which the PV controller binds to a PV of its
// class; the pod mounts it, and its claim goes with the pod.
func TestGenericEphemeralVolume(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	class := ns + "-eph"
	dir := t.TempDir()
	persistentVolume(t, ns+"-eph", class, v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}, nil)
	pod := busybox(ns, "eph", "sh", "-c", "echo $(hostname) > /scratch/f && sleep 3600")
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		}}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("scratch", "/scratch")}
	cluster.CreatePod(t, pod)
	p, err := cluster.WaitForPod(ctxT(t), ns, pod.Name, 2*time.Minute, harness.PodReady)
	if err != nil {
		t.Fatal(err)
	}
	pvc, err := cluster.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctxT(t), "eph-scratch", metav1.GetOptions{})
	if err != nil || !metav1.IsControlledBy(pvc, p) {
		t.Fatalf("the pod's claim: %v", err)
	}
	if out := execIn(t, ns, pod.Name, "c", "cat", "/scratch/f"); out != "eph\n" {
		t.Errorf("read %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "eph\n" {
		t.Errorf("on the PV: %q %v", b, err)
	}
	removePod(t, ns, pod.Name)
}

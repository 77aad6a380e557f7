package podspec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/objects"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// claimFixture is a translation whose API has the given claims and
// volumes, on node "node1".
func claimFixture(t *testing.T, objs ...runtime.Object) (*Runtime, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")}
	r := New(Config{RootDir: t.TempDir(), Objects: objects.NewClient(client), Node: fixedNode{res}, PersistentVolumes: client.CoreV1()})
	return r, client
}

// claimPod is pod name (UID uid-<name>) mounting claim as volume "a".
func claimPod(name, claim string, readOnly bool) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	pod.Spec.Volumes = []v1.Volume{{Name: "a", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}
	pod.Spec.Containers = []v1.Container{{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "a", MountPath: "/data"}}}}
	return pod
}

// boundClaim is claim bound to PV pvName with source src.
func boundClaim(claim, pvName string, src v1.PersistentVolumeSource) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: claim, UID: types.UID("uid-" + claim)},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: pvName}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: src, VolumeMode: ptr.To(v1.PersistentVolumeFilesystem),
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		ClaimRef:    &v1.ObjectReference{Namespace: "ns", Name: claim, UID: pvc.UID}}}
	return pvc, pv
}

func onNode(pv *v1.PersistentVolume, node string) {
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}
}

// failedMount is the FailedMount message of err, or the test fails.
func failedMount(t *testing.T, err error) string {
	t.Helper()
	var f *lifecycle.Failure
	if !errors.As(err, &f) || f.Reason != "FailedMount" {
		t.Fatalf("want a FailedMount, got %v", err)
	}
	return f.Message
}

// A pod whose claim is not bound yet waits with the kubelet's event, and
// starts once the claim is bound: the claim is read again on each try.
func TestClaimWaitsUntilBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pv")
	pvc, pv := boundClaim("data", "pv-h", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: path, Type: ptr.To(v1.HostPathDirectoryOrCreate)}})
	pvc.Status.Phase = v1.ClaimPending
	r, client := claimFixture(t, pvc, pv)
	pod := claimPod("p", "data", false)
	ctx := context.Background()
	err := r.setupVolumes(ctx, pod, nil)
	want := "Unable to attach or mount volumes: unmounted volumes=[a], unattached volumes=[], failed to process volumes=[a]: error processing PVC ns/data: PVC is not bound"
	if got := failedMount(t, err); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := r.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], nil, nil); err == nil {
		t.Error("a container mounts a volume not set up")
	}
	pvc.Status.Phase = v1.ClaimBound
	must(t, client.Tracker().Update(v1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), pvc, "ns"))
	must(t, r.setupVolumes(ctx, pod, nil))
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Errorf("DirectoryOrCreate hostPath PV not made: %v", err)
	}
	ms, err := r.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], nil, nil)
	if err != nil || len(ms) != 1 || ms[0].HostPath != path || ms[0].ReadOnly {
		t.Errorf("mounts %+v %v, want %s read-write", ms, err, path)
	}
	// Resolved once: refreshing the pod's volumes reads no claim again.
	client.ClearActions()
	must(t, r.setupVolumes(ctx, pod, nil))
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "persistentvolumeclaims" || a.GetResource().Resource == "persistentvolumes" {
			t.Errorf("claim read again: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// A hostPath PV is the hostPath volume's path, with its type checks; the
// pod's readOnly makes the mount read-only.
func TestClaimHostPathPV(t *testing.T) {
	dir := t.TempDir()
	pvc, pv := boundClaim("data", "pv-h", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectory)}})
	missing := filepath.Join(t.TempDir(), "missing")
	pvc2, pv2 := boundClaim("gone", "pv-gone", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: missing, Type: ptr.To(v1.HostPathDirectory)}})
	pvc3, pv3 := boundClaim("opts", "pv-opts", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}})
	pv3.Spec.MountOptions = []string{"noatime"}
	pvc4, pv4 := boundClaim("far", "pv-far", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}})
	onNode(pv4, "node2")
	pvc5, pv5 := boundClaim("fc", "pv-fc", v1.PersistentVolumeSource{FC: &v1.FCVolumeSource{WWIDs: []string{"x"}}})
	r, _ := claimFixture(t, pvc, pv, pvc2, pv2, pvc3, pv3, pvc4, pv4, pvc5, pv5)
	ctx := context.Background()

	pod := claimPod("p", "data", true)
	must(t, r.setupVolumes(ctx, pod, nil))
	ms, err := r.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], nil, nil)
	if err != nil || len(ms) != 1 || ms[0].HostPath != dir || !ms[0].ReadOnly {
		t.Errorf("mounts %+v %v, want %s read-only", ms, err, dir)
	}

	for claim, want := range map[string]string{
		"gone": `MountVolume.SetUp failed for volume "pv-gone" : hostPath type check failed: ` + missing + ` is not a directory`,
		"opts": `MountVolume.MountOptionSupport check failed for volume "pv-opts" : mount options are not supported for this volume type`,
		"far":  `MountVolume.NodeAffinity check failed for volume "pv-far" : no matching NodeSelectorTerms`,
		"fc":   `MountVolume.SetUp failed for volume "pv-fc" : volume type not supported by hostlet`,
	} {
		pod := claimPod("p-"+claim, claim, false)
		if got := failedMount(t, r.setupVolumes(ctx, pod, nil)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", claim, got, want)
		}
	}
}

// A local PV is bind-mounted into the pod's volume directory, where the
// kubelet has it, given to the pod's fsGroup by its first pod; its mount
// options apply; the teardown unmounts it and leaves its data alone.
func TestClaimLocalPV(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for bind mounts")
	}
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "keep"), []byte("pv data"), 0o644))
	pvc, pv := boundClaim("data", "pv-l", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}})
	onNode(pv, "node1")
	roDir := t.TempDir()
	pvcRO, pvRO := boundClaim("ro", "pv-ro", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: roDir}})
	pvRO.Spec.MountOptions = []string{"ro", "nosuid"}
	missing := filepath.Join(t.TempDir(), "missing")
	pvcM, pvM := boundClaim("missing", "pv-m", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: missing}})
	pvcF, pvF := boundClaim("far", "pv-far", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}})
	onNode(pvF, "node2")
	r, _ := claimFixture(t, pvc, pv, pvcRO, pvRO, pvcM, pvM, pvcF, pvF)
	ctx := context.Background()

	pod := claimPod("p", "data", false)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(4321))}
	t.Cleanup(func() { _ = r.teardownVolumes(string(pod.UID)) })
	must(t, r.setupVolumes(ctx, pod, nil))
	must(t, r.setupVolumes(ctx, pod, nil)) // set up once, not stacked
	target := filepath.Join(r.cfg.RootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~local-volume", "pv-l")
	ms, err := r.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], nil, nil)
	if err != nil || len(ms) != 1 || ms[0].HostPath != target || ms[0].ReadOnly {
		t.Fatalf("mounts %+v %v, want %s read-write", ms, err, target)
	}
	if mounts, _ := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target)); len(mounts) != 1 {
		t.Errorf("%d mounts at %s, want 1", len(mounts), target)
	}
	if b, err := os.ReadFile(filepath.Join(target, "keep")); err != nil || string(b) != "pv data" {
		t.Errorf("PV data through the mount: %q %v", b, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Sys().(*syscall.Stat_t).Gid != 4321 || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("fsGroup not applied to the local PV: %v %v", fi.Mode(), err)
	}

	podRO := claimPod("p-ro", "ro", false)
	t.Cleanup(func() { _ = r.teardownVolumes(string(podRO.UID)) })
	must(t, r.setupVolumes(ctx, podRO, nil))
	ms, err = r.containerMounts(context.Background(), podRO, &podRO.Spec.Containers[0], nil, nil)
	if err != nil || len(ms) != 1 || !ms[0].ReadOnly {
		t.Fatalf("mounts %+v %v, want read-only by the PV's mount options", ms, err)
	}
	if err := os.WriteFile(filepath.Join(ms[0].HostPath, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through a ro local PV: %v, want EROFS", err)
	}

	for claim, want := range map[string]string{
		"missing": `MountVolume.NewMounter initialization failed for volume "pv-m" : path "` + missing + `" does not exist`,
		"far":     `MountVolume.NodeAffinity check failed for volume "pv-far" : no matching NodeSelectorTerms`,
	} {
		p := claimPod("p-"+claim, claim, false)
		if got := failedMount(t, r.setupVolumes(ctx, p, nil)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", claim, got, want)
		}
	}

	torn, err := r.teardownPodVolumes(string(pod.UID))
	if err != nil || !torn {
		t.Fatalf("teardown: %v %v", torn, err)
	}
	if mounts, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(r.layout().PodDir(pod.UID))); len(mounts) != 0 {
		t.Errorf("still mounted: %v", mounts[0].Mountpoint)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(b) != "pv data" {
		t.Errorf("teardown reached into the PV: %q %v", b, err)
	}
}

// A ReadWriteOncePod volume is given to one pod of the node at a time.
func TestClaimReadWriteOncePod(t *testing.T) {
	pvc, pv := boundClaim("data", "pv-h", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: t.TempDir()}})
	pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}
	r, _ := claimFixture(t, pvc, pv)
	ctx := context.Background()
	a, b := claimPod("a", "data", false), claimPod("b", "data", false)
	must(t, r.setupVolumes(ctx, a, nil))
	want := `MountVolume.SetUp failed for volume "pv-h" : volume uses the ReadWriteOncePod access mode and is already in use by another pod`
	if got := failedMount(t, r.setupVolumes(ctx, b, nil)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	must(t, r.setupVolumes(ctx, a, nil))
	_, _ = r.volumes.ReleasePod(ctx, a.UID)
	must(t, r.setupVolumes(ctx, b, nil))
}

package volumes

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func claimPod(vols ...v1.Volume) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "pod-uid"}}
	pod.Spec.Volumes = vols
	c := v1.Container{Name: "app"}
	for _, v := range vols {
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	pod.Spec.Containers = []v1.Container{c}
	return pod
}

func pvcVolume(name, claim string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func boundPair(claim, pvName string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: claim, UID: types.UID("uid-" + claim)},
		Spec:   v1.PersistentVolumeClaimSpec{VolumeName: pvName},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/srv/" + pvName}},
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: claim, UID: pvc.UID},
			VolumeMode:             ptr.To(v1.PersistentVolumeFilesystem)}}
	return pvc, pv
}

func TestResolveBoundClaim(t *testing.T) {
	pvc, pv := boundPair("data", "pv-1")
	api := fake.NewClientset(pvc, pv).CoreV1()
	pod := claimPod(pvcVolume("a", "data", true))
	c, err := Resolve(context.Background(), api, pod, &pod.Spec.Volumes[0])
	if err != nil {
		t.Fatal(err)
	}
	if c.PV.Name != "pv-1" || c.Name() != "pv-1" || c.PVC.Name != "data" || !c.ReadOnly {
		t.Errorf("resolved %s/%s readOnly %v", c.PVC.Name, c.PV.Name, c.ReadOnly)
	}
}

// Each way a claim is not usable (yet) gets the kubelet's words.
func TestResolveErrors(t *testing.T) {
	now := metav1.Now()
	for _, c := range []struct {
		name string
		mod  func(*v1.PersistentVolumeClaim, *v1.PersistentVolume)
		want string
	}{
		{name: "no claim", want: `error processing PVC ns/data: failed to fetch PVC from API server: persistentvolumeclaims "data" not found`,
			mod: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { pvc.Name = "other" }},
		{name: "pending", want: "error processing PVC ns/data: PVC is not bound",
			mod: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { pvc.Status.Phase = v1.ClaimPending }},
		{name: "lost", want: "error processing PVC ns/data: PVC is not bound",
			mod: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { pvc.Status.Phase = v1.ClaimLost }},
		{name: "deleted unprotected", want: "error processing PVC ns/data: PVC is being deleted",
			mod: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
				pvc.DeletionTimestamp, pvc.Finalizers = &now, []string{"example.com/other"}
			}},
		{name: "no volume name", want: "error processing PVC ns/data: PVC has empty pvc.Spec.VolumeName",
			mod: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { pvc.Spec.VolumeName = "" }},
		{name: "no PV", want: `error processing PVC ns/data: failed to fetch PV pv-1 from API server: persistentvolumes "pv-1" not found`,
			mod: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Name = "pv-2" }},
		{name: "PV not bound", want: "error processing PVC ns/data: found PV object pv-1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim",
			mod: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Spec.ClaimRef = nil }},
		{name: "PV of an older claim", want: "error processing PVC ns/data: found PV object pv-1 but its pv.Spec.ClaimRef.UID old does not point to claim.UID uid-data",
			mod: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Spec.ClaimRef.UID = "old" }},
		{name: "block mounted", want: "volume a has volumeMode Block, but is specified in volumeMounts",
			mod: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
				pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pvc, pv := boundPair("data", "pv-1")
			c.mod(pvc, pv)
			pod := claimPod(pvcVolume("a", "data", false))
			_, err := Resolve(context.Background(), fake.NewClientset(pvc, pv).CoreV1(), pod, &pod.Spec.Volumes[0])
			if err == nil || err.Error() != c.want {
				t.Errorf("got %v\nwant %s", err, c.want)
			}
		})
	}
}

// A claim being deleted while pvc-protection holds it is still in use by
// its pods, and a restarted node goes on using it.
func TestResolveProtectedClaimBeingDeleted(t *testing.T) {
	pvc, pv := boundPair("data", "pv-1")
	pvc.DeletionTimestamp, pvc.Finalizers = ptr.To(metav1.Now()), []string{"kubernetes.io/pvc-protection"}
	pod := claimPod(pvcVolume("a", "data", false))
	if _, err := Resolve(context.Background(), fake.NewClientset(pvc, pv).CoreV1(), pod, &pod.Spec.Volumes[0]); err != nil {
		t.Error(err)
	}
}

func TestResolveVolumeModes(t *testing.T) {
	pvc, pv := boundPair("data", "pv-1")
	pod := claimPod(pvcVolume("a", "data", false))
	pod.Spec.Containers[0].VolumeMounts = nil
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "a", DevicePath: "/dev/a"}}
	api := fake.NewClientset(pvc, pv).CoreV1()
	if _, err := Resolve(context.Background(), api, pod, &pod.Spec.Volumes[0]); err == nil ||
		err.Error() != "volume a has volumeMode Filesystem, but is specified in volumeDevices" {
		t.Errorf("filesystem PV as a device: %v", err)
	}
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	api = fake.NewClientset(pvc, pv).CoreV1()
	c, err := Resolve(context.Background(), api, pod, &pod.Spec.Volumes[0])
	if err != nil || !c.Block() {
		t.Errorf("block PV as a device: %v", err)
	}
}

// A generic ephemeral volume's claim is <pod>-<volume>, and it must be
// the pod's own: a claim of that name someone else made is not used.
func TestResolveGenericEphemeral(t *testing.T) {
	eph := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{}}}}
	pod := claimPod(eph)
	if name, ro, ok := ClaimName(pod, &pod.Spec.Volumes[0]); name != "web-0-scratch" || ro || !ok {
		t.Fatalf("claim of the ephemeral volume: %q %v %v", name, ro, ok)
	}
	pvc, pv := boundPair("web-0-scratch", "pv-e")
	api := fake.NewClientset(pvc, pv).CoreV1()
	if _, err := Resolve(context.Background(), api, pod, &pod.Spec.Volumes[0]); err == nil ||
		err.Error() != "PVC ns/web-0-scratch was not created for pod ns/web-0 (pod is not owner)" {
		t.Errorf("a claim not the pod's: %v", err)
	}
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: "pod-uid", Controller: ptr.To(true)}}
	api = fake.NewClientset(pvc, pv).CoreV1()
	c, err := Resolve(context.Background(), api, pod, &pod.Spec.Volumes[0])
	if err != nil || c.PV.Name != "pv-e" {
		t.Errorf("the pod's own claim: %v", err)
	}
	if _, _, ok := ClaimName(pod, &v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}); ok {
		t.Error("an emptyDir has a claim")
	}
}

// The claims are read with GETs, as the node authorizer allows a node.
func TestResolveOnlyGets(t *testing.T) {
	pvc, pv := boundPair("data", "pv-1")
	client := fake.NewClientset(pvc, pv)
	pod := claimPod(pvcVolume("a", "data", false))
	if _, err := Resolve(context.Background(), client.CoreV1(), pod, &pod.Spec.Volumes[0]); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("%s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestUnprocessedError(t *testing.T) {
	err := UnprocessedError([]string{"b", "a"}, []error{errors.New("error processing PVC ns/b: PVC is not bound"), errors.New("x")})
	want := "unmounted volumes=[a b], unattached volumes=[], failed to process volumes=[a b]: error processing PVC ns/b: PVC is not bound; x"
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
}

func TestPVFacts(t *testing.T) {
	_, pv := boundPair("data", "pv-1")
	pv.Spec.MountOptions = []string{"noatime"}
	if got := MountOptions(pv); len(got) != 1 || got[0] != "noatime" {
		t.Errorf("mount options %q", got)
	}
	pv.Annotations = map[string]string{v1.MountOptionAnnotation: "ro,,nosuid"}
	if got := MountOptions(pv); strings.Join(got, ",") != "ro,nosuid" {
		t.Errorf("the annotation goes first: %q", got)
	}
	pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}
	if !ReadWriteOncePod(pv) {
		t.Error("ReadWriteOncePod alone")
	}
	pv.Spec.AccessModes = append(pv.Spec.AccessModes, v1.ReadWriteOnce)
	if ReadWriteOncePod(pv) {
		t.Error("ReadWriteOncePod with another mode is not enforced by the kubelet")
	}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}
	if err := CheckNodeAffinity(pv, map[string]string{v1.LabelHostname: "n1"}); err != nil {
		t.Error(err)
	}
	if err := CheckNodeAffinity(pv, map[string]string{v1.LabelHostname: "n2"}); err == nil || err.Error() != "no matching NodeSelectorTerms" {
		t.Errorf("another node: %v", err)
	}
}

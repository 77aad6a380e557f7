package volumemanager

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// recordingCSI publishes nothing: it records what it was asked to publish
// and says where.
type recordingCSI struct {
	m      *Manager
	claims []string
	pvs    []*v1.PersistentVolume
	ro     []bool
}

func (f *recordingCSI) SetUpPV(_ context.Context, pod *v1.Pod, _, claim string, pv *v1.PersistentVolume, readOnly bool) (string, bool, error) {
	f.claims, f.pvs, f.ro = append(f.claims, claim), append(f.pvs, pv), append(f.ro, readOnly)
	return csi.TargetPath(f.m.layout, pod.UID, pv.Name), false, nil
}

func (f *recordingCSI) SetUpInline(context.Context, *v1.Pod, *v1.Volume) (string, bool, error) {
	return "", false, errors.New("not an inline CSI volume")
}

func (f *recordingCSI) SetUpBlock(context.Context, *v1.Pod, string, string, *v1.PersistentVolume, bool) (string, error) {
	return "", errors.New("not a block volume")
}

func (f *recordingCSI) TearDownPod(context.Context, types.UID) error { return nil }

func migrationManager(t *testing.T, objs ...*v1.PersistentVolume) (*Manager, *recordingCSI, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	for _, pv := range objs {
		if _, err := client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f := &recordingCSI{}
	m := New(Config{RootDir: t.TempDir(), PersistentVolumes: client.CoreV1(), CSI: f})
	f.m = m
	return m, f, client
}

func boundClaim(t *testing.T, client *fake.Clientset, ns, name, pv string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "pvc-uid"},
		Spec:   v1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// An in-tree AWS EBS PersistentVolume is published through the EBS CSI
// driver as the kubelet's CSI migration translates it (the volume ID
// without its zone, the fsType, the PV's name and mount options), at the
// CSI plugin's path of the PV; a PV of a plugin that is not migrated is
// still refused.
func TestMigratedClaim(t *testing.T) {
	ebs := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-ebs"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{
			VolumeID: "aws://us-east-1a/vol-0123", FSType: "xfs"}},
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, MountOptions: []string{"noatime"},
		ClaimRef:   &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "pvc-uid"},
		VolumeMode: ptr.To(v1.PersistentVolumeFilesystem)}}
	fc := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-fc"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{FC: &v1.FCVolumeSource{WWIDs: []string{"w"}}},
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "other", UID: "pvc-uid"},
		VolumeMode:             ptr.To(v1.PersistentVolumeFilesystem)}}
	m, f, client := migrationManager(t, ebs, fc)
	boundClaim(t, client, "ns", "data", "pv-ebs")
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"}, Spec: v1.PodSpec{
		Volumes:    []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		Containers: []v1.Container{{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/data"}}}}}}
	if err := m.SetUpPod(t.Context(), pod, nil); err != nil {
		t.Fatal(err)
	}
	if len(f.pvs) != 1 {
		t.Fatalf("published %d volumes", len(f.pvs))
	}
	pv := f.pvs[0]
	if pv.Name != "pv-ebs" || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != "ebs.csi.aws.com" || pv.Spec.CSI.VolumeHandle != "vol-0123" ||
		pv.Spec.CSI.FSType != "xfs" || pv.Spec.AWSElasticBlockStore != nil || len(pv.Spec.MountOptions) != 1 || f.claims[0] != "data" {
		t.Errorf("published %+v (claim %q)", pv.Spec, f.claims[0])
	}
	host, ro, err := m.MountSource(pod, &pod.Spec.Volumes[0])
	if want := csi.TargetPath(m.layout, pod.UID, "pv-ebs"); err != nil || host != want || ro {
		t.Errorf("mount source %q %v %v, want %q", host, ro, err, want)
	}
	if ebs.Spec.AWSElasticBlockStore == nil || ebs.Spec.CSI != nil {
		t.Error("the PV read from the API was changed")
	}

	boundClaim(t, client, "ns", "other", "pv-fc")
	pod2 := pod.DeepCopy()
	pod2.UID = "uid-2"
	pod2.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "other"
	err = m.SetUpPod(t.Context(), pod2, nil)
	if f := (*lifecycle.Failure)(nil); !errors.As(err, &f) || !strings.Contains(f.Message, `for volume "pv-fc" : volume type not supported by hostlet`) {
		t.Errorf("an FC PV: %v", err)
	}
}

// An inline gcePersistentDisk volume is published through the GCE PD CSI
// driver as a PersistentVolume named by the driver and the disk, with no
// claim (never expanded), not read-only on the node (its readOnly is the
// attacher's), in the CSI plugin's directory; a source the translation
// refuses is the pod's FailedMount.
func TestMigratedInline(t *testing.T) {
	m, f, _ := migrationManager(t)
	vol := v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{
		PDName: "disk-1", FSType: "ext4", ReadOnly: true}}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{vol}}}
	if got := PluginName(&vol.VolumeSource); got != csi.PluginName {
		t.Errorf("plugin %q", got)
	}
	if IsLocalEphemeral(vol) || HasStats(vol) {
		t.Error("an inline cloud disk counted as the pod's local storage or measured")
	}
	if err := m.SetUpPod(t.Context(), pod, nil); err != nil {
		t.Fatal(err)
	}
	if len(f.pvs) != 1 {
		t.Fatalf("published %d volumes", len(f.pvs))
	}
	pv := f.pvs[0]
	if pv.Name != "pd.csi.storage.gke.io-disk-1" || pv.Spec.CSI.Driver != "pd.csi.storage.gke.io" ||
		!strings.HasSuffix(pv.Spec.CSI.VolumeHandle, "/disks/disk-1") || !pv.Spec.CSI.ReadOnly || f.claims[0] != "" || f.ro[0] {
		t.Errorf("published %s %+v (claim %q, read-only %v)", pv.Name, pv.Spec.CSI, f.claims[0], f.ro[0])
	}
	host, ro, err := m.MountSource(pod, &pod.Spec.Volumes[0])
	if want := csi.TargetPath(m.layout, pod.UID, "pd.csi.storage.gke.io-disk-1"); err != nil || host != want || ro {
		t.Errorf("mount source %q %v %v, want %q", host, ro, err, want)
	}

	bad := pod.DeepCopy()
	bad.UID = "uid-bad"
	bad.Spec.Volumes = []v1.Volume{{Name: "ebs", VolumeSource: v1.VolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{
		VolumeID: "aws://us-east-1a/"}}}}
	err = m.SetUpPod(t.Context(), bad, nil)
	if f := (*lifecycle.Failure)(nil); !errors.As(err, &f) || f.Reason != "FailedMount" || !strings.Contains(f.Message, "failed to translate in-tree pv to CSI") {
		t.Errorf("an untranslatable volume: %v", err)
	}
}

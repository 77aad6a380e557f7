package podspec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hostlet/hostlet/provider/volumes/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeCSI publishes nothing: it says where, or fails as told, and records
// teardowns.
type fakeCSI struct {
	root     string
	err      error
	teardown error
	torn     []types.UID
}

func (f *fakeCSI) SetUpPV(_ context.Context, pod *v1.Pod, volName, claim string, pv *v1.PersistentVolume, readOnly bool) (string, bool, error) {
	return "", false, f.err
}

func (f *fakeCSI) SetUpInline(_ context.Context, pod *v1.Pod, vol *v1.Volume) (string, bool, error) {
	return "", false, f.err
}

func (f *fakeCSI) SetUpBlock(_ context.Context, pod *v1.Pod, volName, claim string, pv *v1.PersistentVolume, readOnly bool) (string, error) {
	return "", f.err
}

func (f *fakeCSI) TearDownPod(_ context.Context, uid types.UID) error {
	f.torn = append(f.torn, uid)
	return f.teardown
}

// A CSI volume's failure is the kubelet's FailedMount text (operation,
// the PV's or inline volume's name, reason); the containers mount an
// inline CSI volume from where the driver published it, read-only if the
// source says so.
func TestCSIVolumeSetup(t *testing.T) {
	r, _ := claimFixture(t)
	f := &fakeCSI{err: &csi.Failure{Op: "MountVolume.MountDevice", Err: errors.New("driver name d not found in the list of registered CSI drivers")}}
	r.cfg.CSI = f
	r.volumes = newVolumeManager(r.cfg)
	ro := true
	pod := claimPod("p", "c", false)
	pod.Spec.Volumes = []v1.Volume{{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d", ReadOnly: &ro}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "eph", MountPath: "/eph"}}
	err := r.setupVolumes(t.Context(), pod, nil)
	if got := failedMount(t, err); got != `MountVolume.MountDevice failed for volume "eph" : driver name d not found in the list of registered CSI drivers` {
		t.Errorf("FailedMount %q", got)
	}
	f.err = nil
	if err := r.setupVolumes(t.Context(), pod, nil); err != nil {
		t.Fatal(err)
	}
	mounts, err := r.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(r.cfg.RootDir, "pods", "uid-p", "volumes", "kubernetes.io~csi", "eph", "mount")
	if len(mounts) != 1 || mounts[0].HostPath != want || !mounts[0].ReadOnly {
		t.Errorf("mounts %+v, want %s read-only", mounts, want)
	}
}

// Without a CSI plugin a CSI volume is refused, not ignored.
func TestCSIVolumeWithoutPlugin(t *testing.T) {
	r, _ := claimFixture(t)
	pod := claimPod("p", "c", false)
	pod.Spec.Volumes = []v1.Volume{{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}}}
	if got := failedMount(t, r.setupVolumes(t.Context(), pod, nil)); got != `MountVolume.SetUp failed for volume "eph" : volume type not supported by hostlet` {
		t.Errorf("FailedMount %q", got)
	}
}

// A pod's directory is not removed while its CSI volumes could not be
// torn down; once they are, it is.
func TestCSITeardownGatesRemoval(t *testing.T) {
	r, _ := claimFixture(t)
	f := &fakeCSI{teardown: errors.New("driver name d not found in the list of registered CSI drivers")}
	r.cfg.CSI = f
	r.volumes = newVolumeManager(r.cfg)
	dir := r.layout().PodDir("uid-p")
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := r.removePodDir(t.Context(), "uid-p"); err == nil {
		t.Error("removed with CSI volumes not torn down")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the pod's directory went with its CSI volumes still published: %v", err)
	}
	f.teardown = nil
	if err := r.removePodDir(t.Context(), "uid-p"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the pod's directory stays: %v", err)
	}
	if len(f.torn) != 2 {
		t.Errorf("teardowns %v", f.torn)
	}
}

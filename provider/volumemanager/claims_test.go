package volumemanager

import (
	"path/filepath"
	"testing"

	"github.com/hostlet/hostlet/provider/volumes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A mapped claim is the container's device by the pod's symlink, "mrw"
// or, for a read-only claim, "r", as the kubelet's makeBlockVolumes; a
// device path must be absolute and its volume mapped.
func TestClaimDevice(t *testing.T) {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-b"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/dev/sdz"}},
		VolumeMode:             ptr.To(v1.PersistentVolumeBlock)}}
	r := New(Config{RootDir: t.TempDir()})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"}}
	if _, err := r.Device(pod, v1.VolumeDevice{Name: "a", DevicePath: "/dev/xvda"}); err == nil ||
		err.Error() != `cannot find volume "a" to pass into container` {
		t.Errorf("unmapped: %v", err)
	}
	if _, err := r.Device(pod, v1.VolumeDevice{Name: "a", DevicePath: "xvda"}); err == nil ||
		err.Error() != "error DevicePath `xvda` must be an absolute path" {
		t.Errorf("relative: %v", err)
	}
	link := filepath.Join(r.layout.PodDeviceMapPath(pod.UID, "kubernetes.io/local-volume"), "pv-b")
	for _, ro := range []bool{false, true} {
		r.claimsMu.Lock()
		r.claims = map[types.UID]map[string]*podClaim{pod.UID: {"a": {Claim: &volumes.Claim{PV: pv, ReadOnly: ro}, mounted: true}}}
		r.claimsMu.Unlock()
		n, err := r.Device(pod, v1.VolumeDevice{Name: "a", DevicePath: "/dev/xvda"})
		want := "mrw"
		if ro {
			want = "r"
		}
		if err != nil || n.HostPath != link || n.ContainerPath != "/dev/xvda" || n.Permissions != want {
			t.Errorf("read-only %v: %+v %v", ro, n, err)
		}
	}
}

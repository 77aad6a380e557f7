package podspec

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// blockPod is pod name using claim as the block volume "a" at /dev/xvda.
func blockPod(name, claim string, readOnly bool) *v1.Pod {
	pod := claimPod(name, claim, readOnly)
	pod.Spec.Containers[0].VolumeMounts = nil
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "a", DevicePath: "/dev/xvda"}}
	return pod
}

// A Block PV is mapped only by the local volume and CSI plugins (the
// kubelet's hostPath plugin is no block plugin; without a CSI plugin a CSI
// PV is not supported), on its node, when its path is a block device; each
// refusal is the kubelet's message.
func TestClaimBlockPVRefused(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		src    v1.PersistentVolumeSource
		node   string
		reason string
		want   string
	}{
		{name: "hostPath", src: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}, reason: "FailedMount",
			want: `MapVolume.FindMapperPluginBySpec failed to find BlockVolumeMapper plugin. Volume plugin is nil. for volume "pv-b"`},
		{name: "csi", src: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}, reason: "FailedMapVolume",
			want: `MapVolume.SetUpDevice failed for volume "pv-b" : volume type not supported by hostlet`},
		{name: "other node", src: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}}, node: "node2", reason: "FailedMount",
			want: `MapVolume.NodeAffinity check failed for volume "pv-b" : no matching NodeSelectorTerms`},
		{name: "a directory", src: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}}, reason: "FailedMapVolume",
			want: `MapVolume.EvalHostSymlinks failed for volume "pv-b" : ` + dir + ` is not a block device`},
		{name: "missing", src: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: filepath.Join(dir, "none")}}, reason: "FailedMapVolume",
			want: `MapVolume.EvalHostSymlinks failed for volume "pv-b" : lstat ` + filepath.Join(dir, "none") + `: no such file or directory`},
	} {
		t.Run(c.name, func(t *testing.T) {
			pvc, pv := boundClaim("data", "pv-b", c.src)
			pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
			if c.node != "" {
				onNode(pv, c.node)
			}
			r, _ := claimFixture(t, pvc, pv)
			err := r.setupVolumes(context.Background(), blockPod("p", "data", false), nil)
			var f *lifecycle.Failure
			if !errors.As(err, &f) || f.Reason != c.reason || f.Message != c.want {
				t.Errorf("got %v\nwant %s: %s", err, c.reason, c.want)
			}
		})
	}
}

// A CSI Block PV is mapped by the CSI plugin: its failure is the kubelet's
// FailedMapVolume with the operation that failed; once mapped, the
// container's device is the pod's symlink under kubernetes.io~csi.
func TestClaimBlockCSI(t *testing.T) {
	pvc, pv := boundClaim("data", "pv-b", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}})
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	r, _ := claimFixture(t, pvc, pv)
	f := &fakeCSI{err: &csi.Failure{Op: "MapVolume.MapPodDevice", Err: errors.New("rpc error: NodePublishVolume: boom")}}
	r.cfg.CSI = f
	r.volumes = newVolumeManager(r.cfg)
	pod := blockPod("p", "data", false)
	err := r.setupVolumes(context.Background(), pod, nil)
	var lf *lifecycle.Failure
	if !errors.As(err, &lf) || lf.Reason != "FailedMapVolume" || lf.Message != `MapVolume.MapPodDevice failed for volume "pv-b" : rpc error: NodePublishVolume: boom` {
		t.Errorf("got %v", err)
	}
	if _, err := r.claimDevice(pod, v1.VolumeDevice{Name: "a", DevicePath: "/dev/xvda"}); err == nil {
		t.Error("a device for a volume not mapped")
	}
	f.err = nil
	if err := r.setupVolumes(context.Background(), pod, nil); err != nil {
		t.Fatal(err)
	}
	n, err := r.claimDevice(pod, v1.VolumeDevice{Name: "a", DevicePath: "/dev/xvda"})
	if want := csi.BlockLink(r.layout(), pod.UID, "pv-b"); err != nil || n.HostPath != want || n.Permissions != "mrw" {
		t.Errorf("device %+v %v, want %s", n, err, want)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images/csihostdir"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CSI migration as the kubelet's: the test's CSI driver registers as the
// AWS EBS CSI driver (ebs.csi.aws.com), the name the in-tree
// awsElasticBlockStore plugin is migrated to. The node's CSINode lists the
// migrated in-tree plugins; a pod with a claim of an in-tree EBS PV and an
// inline awsElasticBlockStore volume runs with both staged and published
// through the driver (the volume IDs without their zone, at the CSI
// plugin's paths: the PV's name, and the driver and disk for the inline
// one), reads and writes them, and deleting it unpublishes and unstages
// both.
func TestCSIMigration(t *testing.T) {
	skipIfNoCluster(t)
	const driver = "ebs.csi.aws.com"
	ns := cluster.NewNamespace(t)
	state := t.TempDir()
	csiDriverObject(t, driver, false, "", storagev1.VolumeLifecyclePersistent)
	startCSIDriver(t, driver, state)

	pollUntil(t, time.Minute, "the migrated plugins on the node's CSINode", func() bool {
		cn, err := cluster.Client().StorageV1().CSINodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
		return err == nil && slices.Contains(strings.Split(cn.Annotations[v1.MigratedPluginsAnnotationKey], ","), "kubernetes.io/aws-ebs")
	})

	pv := ns + "-ebs"
	pvHandle, inlineHandle := "vol-"+ns, "vol-inline-"+ns
	persistentVolume(t, pv, "", v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{
		VolumeID: "aws://zone-a/" + pvHandle, FSType: "ext4"}}, nil)
	claim(t, ns, "data", "", pv)
	pod := claimPodSpec(ns, "app", "data", false)
	pod.Spec.NodeName = nodeName
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{
		AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: inlineHandle}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, mount("inline", "/inline"))
	cluster.CreatePod(t, pod)
	running := waitReady(t, ns, pod.Name)
	execIn(t, ns, pod.Name, "c", "sh", "-c", "echo pv > /data/f && echo inline > /inline/f")

	publishes := csiCalls(t, state, "NodePublishVolume")
	targets := map[string]string{}
	for _, c := range publishes {
		targets[c.Volume] = c.Target
	}
	csiDir := filepath.Join(node.RootDir(), "pods", string(running.UID), "volumes", "kubernetes.io~csi")
	if want := filepath.Join(csiDir, pv, "mount"); targets[pvHandle] != want {
		t.Errorf("the PV published at %q, want %q (%+v)", targets[pvHandle], want, publishes)
	}
	if want := filepath.Join(csiDir, driver+"-"+inlineHandle, "mount"); targets[inlineHandle] != want {
		t.Errorf("the inline volume published at %q, want %q (%+v)", targets[inlineHandle], want, publishes)
	}
	if n := len(csiCalls(t, state, "NodeStageVolume")); n != 2 {
		t.Errorf("NodeStageVolume called %d times, want 2", n)
	}
	for handle, want := range map[string]string{pvHandle: "pv\n", inlineHandle: "inline\n"} {
		if b, err := os.ReadFile(filepath.Join(csihostdir.VolumeDir(state, handle), "f")); err != nil || string(b) != want {
			t.Errorf("volume %s holds %q %v", handle, b, err)
		}
	}

	removePod(t, ns, pod.Name)
	pollUntil(t, 2*time.Minute, "both volumes unpublished and unstaged", func() bool {
		return len(csiCalls(t, state, "NodeUnpublishVolume")) >= 2 && len(csiCalls(t, state, "NodeUnstageVolume")) >= 2
	})
	podDir := filepath.Join(node.RootDir(), "pods", string(running.UID))
	pollUntil(t, time.Minute, "nothing left mounted of the pod", func() bool {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(podDir))
		return err == nil && len(mounts) == 0
	})
}

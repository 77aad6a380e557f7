package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// On a node whose root dir is a small tmpfs: a pod writing past its
// emptyDir's sizeLimit is evicted with the kubelet's local storage message
// without any node pressure; then a pod filling its emptyDir past
// --eviction-hard nodefs.available is evicted with the kubelet's
// ephemeral-storage message and DisruptionTarget condition, while a quiet
// pod within its ephemeral-storage request keeps running.
func TestEvictionDisk(t *testing.T) {
	skipIfNoCluster(t)
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	const name = "hostlet-eviction-disk"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--root-dir", root,
		"--eviction-hard", "nodefs.available<20%",
		"--eviction-minimum-reclaim", "nodefs.available=1Mi",
		"--node-status-update-frequency", "1s",
		"--eviction-monitoring-interval", "2s",
		"--eviction-pressure-transition-period", "2s",
		"--volume-stats-agg-period", "2s",
	}})
	t.Cleanup(func() { h.Stop(); _ = unix.Unmount(root, unix.MNT_DETACH) })
	ctx := ctxT(t)
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionFalse, "")); err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	withScratch := func(p *v1.Pod, sizeLimit *resource.Quantity) *v1.Pod {
		p.Spec.NodeName = name
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: sizeLimit}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		return p
	}

	// Local storage eviction: over the sizeLimit, no threshold crossed.
	limit := resource.MustParse("4Mi")
	sized := withScratch(busybox(ns, "sized", "sh", "-c", "dd if=/dev/zero of=/scratch/f bs=1M count=6; sleep 3600"), &limit)
	cluster.CreatePod(t, sized)
	got := waitPhase(t, ns, sized.Name, v1.PodFailed)
	if want := `Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". `; got.Status.Reason != "Evicted" || got.Status.Message != want {
		t.Errorf("sized: reason %q message %q, want Evicted %q", got.Status.Reason, got.Status.Message, want)
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctx, sized.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, sized.Name)

	quiet := busybox(ns, "quiet", "sleep", "3600")
	quiet.Spec.NodeName = name
	quiet.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("8Mi")}
	cluster.CreatePod(t, quiet)
	waitPhase(t, ns, quiet.Name, v1.PodRunning)

	// 52Mi of 64Mi leaves less than 20% (12.8Mi) available. hostlet
	// keeps a failed pod's emptyDir until the pod is deleted (the kubelet
	// tears it down when the pod ends): the writer removes its file when
	// told to stop, so that its eviction relieves the pressure and the
	// quiet pod is not next.
	writer := withScratch(busybox(ns, "writer", "sh", "-c",
		"trap 'rm -f /scratch/f; exit 1' TERM; dd if=/dev/zero of=/scratch/f bs=1M count=52; sleep 3600 & wait"), nil)
	cluster.CreatePod(t, writer)
	got = waitPhase(t, ns, writer.Name, v1.PodFailed)
	const prefix = "The node was low on resource: ephemeral-storage. Threshold quantity: "
	if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, prefix) {
		t.Errorf("writer: reason %q message %q", got.Status.Reason, got.Status.Message)
	}
	checkEvictedCondition(t, got)
	if msg := waitEvent(t, ns, writer.Name, "Evicted"); msg != got.Status.Message {
		t.Errorf("Evicted event %q, want the status message", msg)
	}
	t.Logf("evicted: %s", got.Status.Message)
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeDiskPressure, v1.ConditionFalse, "")); err != nil {
		t.Fatal(err)
	}

	q, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, quiet.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q.Status.Phase != v1.PodRunning || q.Status.Reason != "" {
		t.Errorf("quiet pod: phase %s reason %q message %q", q.Status.Phase, q.Status.Reason, q.Status.Message)
	}
}

// checkEvictedCondition checks the DisruptionTarget condition the kubelet
// sets on a pod it evicts for node pressure.
func checkEvictedCondition(t *testing.T, p *v1.Pod) {
	t.Helper()
	var dt *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			dt = &p.Status.Conditions[i]
		}
	}
	if dt == nil || dt.Status != v1.ConditionTrue || dt.Reason != v1.PodReasonTerminationByKubelet || dt.Message != p.Status.Message {
		t.Errorf("%s: DisruptionTarget %+v", p.Name, dt)
	}
}

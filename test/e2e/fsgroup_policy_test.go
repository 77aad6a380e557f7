package e2e

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// fsGroupChangePolicy: OnRootMismatch as the kubelet's: a local PV's files
// are given to the pod's fsGroup by a walk only while the volume's root
// is not the group's already (a file put back to another group inside a
// matching root stays so); Always walks at every pod's start.
func TestFSGroupChangePolicyLocalPV(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pv := ns + "-local"
	persistentVolume(t, pv, "", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}},
		&v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}})
	claim(t, ns, "data", "", pv)
	group := func(name string, policy v1.PodFSGroupChangePolicy) string {
		t.Helper()
		pod := busybox(ns, name, "stat", "-c", "%g", "/data/f")
		pod.Spec.NodeName = nodeName
		pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(1001)), FSGroupChangePolicy: &policy}
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("data", "/data")}
		out := runOutput(t, pod)
		// Gone, volumes and all, before the next: each is the PV's first
		// pod on the node, the one that sets its owner.
		removePod(t, ns, name)
		return out
	}
	if got := group("mismatch", v1.FSGroupChangeOnRootMismatch); got != "1001\n" {
		t.Fatalf("a root of another group: the file's group is %q, want 1001", got)
	}
	if err := os.Chown(file, -1, 0); err != nil {
		t.Fatal(err)
	}
	if got := group("match", v1.FSGroupChangeOnRootMismatch); got != "0\n" {
		t.Errorf("a matching root was walked: the file's group is %q, want 0", got)
	}
	if got := group("always", v1.FSGroupChangeAlways); got != "1001\n" {
		t.Errorf("Always: the file's group is %q, want 1001", got)
	}
}

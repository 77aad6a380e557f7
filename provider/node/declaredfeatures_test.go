package node

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestDeclaredFeaturesDiscovery(t *testing.T) {
	none := func(string) bool { return false }
	d, err := NewDeclaredFeatures(none, KubeletVersion)
	if err != nil {
		t.Fatal(err)
	}
	// No CPU manager is the kubelet's policy "none": guaranteed pods' CPU
	// resizes are supported; no gated feature is declared.
	if got := d.Names(); !slices.Equal(got, []string{"GuaranteedQoSPodCPUResize"}) {
		t.Errorf("declared %v", got)
	}
	all := func(string) bool { return true }
	if d, err = NewDeclaredFeatures(all, KubeletVersion); err != nil {
		t.Fatal(err)
	}
	if got := d.Names(); !slices.Contains(got, "RestartAllContainersOnContainerExits") {
		t.Errorf("with every gate on, declared %v", got)
	}
	if _, err := NewDeclaredFeatures(none, "not a version"); err == nil {
		t.Error("a bad version accepted")
	}
	var off *DeclaredFeatures
	if off.Names() != nil {
		t.Error("the gate off declares features")
	}
}

func TestDeclaredFeaturesAdmit(t *testing.T) {
	d, err := NewDeclaredFeatures(func(string) bool { return false }, KubeletVersion)
	if err != nil {
		t.Fatal(err)
	}
	plain := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	if _, _, ok := d.admit(plain); !ok {
		t.Error("a pod needing no feature refused")
	}
	needs := plain.DeepCopy()
	needs.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers}}
	reason, msg, ok := d.admit(needs)
	if ok || reason != "PodFeatureUnsupported" || !strings.Contains(msg, "RestartAllContainersOnContainerExits") {
		t.Errorf("admit = %q %q %v", reason, msg, ok)
	}
	var off *DeclaredFeatures
	if _, _, ok := off.admit(needs); !ok {
		t.Error("the gate off refuses pods")
	}
	if off.MissingForUpdate(plain, needs) != "" || d.MissingForUpdate(plain, plain) != "" {
		t.Error("an update without new needs warned of")
	}
}

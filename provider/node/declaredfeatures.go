package node

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	ndffeatures "k8s.io/component-helpers/nodedeclaredfeatures/features"
)

// DeclaredFeatures is the kubelet's NodeDeclaredFeatures (alpha in 1.35,
// GA in 1.37): the node lists in status.declaredFeatures the features it
// has that a scheduler and API server of a newer version must not assume,
// and refuses a pod that needs one it lacks. The discovery and the
// inference are component-helpers', as the kubelet's, so a 1.37 scheduler
// and hostlet agree on what a pod needs.
type DeclaredFeatures struct {
	fw      *ndf.Framework
	names   []string
	set     ndf.FeatureSet
	version *version.Version
}

// gateFunc adapts a feature gate check to the framework's FeatureGate.
type gateFunc func(string) bool

func (g gateFunc) Enabled(key string) bool { return g(key) }

// NewDeclaredFeatures discovers the node's features. enabled says whether a
// feature gate is on and hostlet has the behaviour it gates: a feature
// hostlet does not implement is never declared, whatever the gate says.
// hostlet has no CPU manager, so its policy is the kubelet's "none".
func NewDeclaredFeatures(enabled func(string) bool, kubeletVersion string) (*DeclaredFeatures, error) {
	v, err := version.Parse(kubeletVersion)
	if err != nil {
		return nil, fmt.Errorf("failed to parse version: %w", err)
	}
	fw, err := ndf.New(ndffeatures.AllFeatures)
	if err != nil {
		return nil, fmt.Errorf("failed to create node feature helper: %w", err)
	}
	names := fw.DiscoverNodeFeatures(&ndf.NodeConfiguration{
		FeatureGates: gateFunc(enabled),
		StaticConfig: ndf.StaticConfiguration{CPUManagerPolicy: "none"},
		Version:      v,
	})
	return &DeclaredFeatures{fw: fw, names: names, set: ndf.NewFeatureSet(names...), version: v}, nil
}

// Names is status.declaredFeatures (sorted, as the framework gives them).
func (d *DeclaredFeatures) Names() []string {
	if d == nil {
		return nil
	}
	return append([]string{}, d.names...)
}

// admit is the kubelet's declaredFeaturesAdmitHandler.
func (d *DeclaredFeatures) admit(pod *v1.Pod) (string, string, bool) {
	if d == nil {
		return "", "", true
	}
	reqs, err := d.fw.InferForPodScheduling(&ndf.PodInfo{Spec: &pod.Spec, Status: &pod.Status}, d.version)
	if err != nil {
		return podFeatureUnsupported, fmt.Sprintf("Failed to infer pod's feature requirements: %v", err), false
	}
	if reqs.Len() == 0 {
		return "", "", true
	}
	match, err := ndf.MatchNodeFeatureSet(reqs, d.set)
	if err != nil {
		return podFeatureUnsupported, fmt.Sprintf("Failed to match pod's feature requirements against the node: %v", err), false
	}
	if !match.IsMatch {
		return podFeatureUnsupported, "Pod requires node features that are not available: " + strings.Join(match.UnsatisfiedRequirements, ", "), false
	}
	return "", "", true
}

// MissingFeaturesForUpdate is MissingForUpdate of the node's declared
// features (none without the gate).
func (n *Node) MissingFeaturesForUpdate(old, pod *v1.Pod) string {
	return n.cfg.DeclaredFeatures.MissingForUpdate(old, pod)
}

// MissingForUpdate names the features an update of a running pod needs
// that the node lacks ("" when none): the kubelet only warns of it (event
// FailedNodeDeclaredFeaturesCheck) and goes on with the update.
func (d *DeclaredFeatures) MissingForUpdate(old, pod *v1.Pod) string {
	if d == nil || old == nil {
		return ""
	}
	reqs, err := d.fw.InferForPodUpdate(&ndf.PodInfo{Spec: &old.Spec, Status: &old.Status}, &ndf.PodInfo{Spec: &pod.Spec, Status: &pod.Status}, d.version)
	if err != nil || reqs.Len() == 0 {
		return ""
	}
	match, err := ndf.MatchNodeFeatureSet(reqs, d.set)
	if err != nil || match.IsMatch {
		return ""
	}
	return strings.Join(match.UnsatisfiedRequirements, ", ")
}

// podFeatureUnsupported is the kubelet's lifecycle.PodFeatureUnsupported.
const podFeatureUnsupported = "PodFeatureUnsupported"

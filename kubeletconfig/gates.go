package kubeletconfig

import (
	"k8s.io/component-base/featuregate"
)

//go:generate sh -c "cd ../hack/kubeletgates && go run . v1.35.4 > ../../kubeletconfig/gates_generated.go"

// NewFeatureGate is a feature gate that knows the kubelet's gates (its
// features, the API machinery's, logging's and client-go's), each at its
// stage in the kubelet of this version, with their dependencies: setting
// an unknown gate, or a locked one to the other value, is the kubelet's
// error.
func NewFeatureGate() featuregate.MutableFeatureGate {
	fg := featuregate.NewFeatureGate()
	if err := fg.Add(kubeletGates); err != nil {
		panic(err)
	}
	deps := make(map[featuregate.Feature][]featuregate.Feature, len(kubeletGateDependencies))
	for k, v := range kubeletGateDependencies {
		deps[k] = append([]featuregate.Feature(nil), v...)
	}
	if err := fg.AddDependencies(deps); err != nil {
		panic(err)
	}
	return fg
}

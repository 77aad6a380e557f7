package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A node-critical pod (static, or of a system priority, in the
// system-node-critical class) gets the guaranteed OOM score adjustment
// whatever its QoS class, as the kubelet gives it; others their class's.
func TestNodeCriticalOOMScore(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{PriorityClassName: "system-node-critical",
		Containers: []v1.Container{{Name: "c"}}}}
	pod.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	if !nodeCritical(pod) {
		t.Error("static system-node-critical pod not node-critical")
	}
	pod.Spec.PriorityClassName = "system-cluster-critical"
	if nodeCritical(pod) {
		t.Error("system-cluster-critical pod node-critical")
	}
	api := &v1.Pod{Spec: v1.PodSpec{PriorityClassName: "system-node-critical"}}
	if nodeCritical(api) {
		t.Error("an API pod without its priority resolved is node-critical")
	}
	p := int32(2000001000)
	api.Spec.Priority = &p
	if !nodeCritical(api) {
		t.Error("system-node-critical API pod not node-critical")
	}
}

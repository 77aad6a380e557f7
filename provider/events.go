package provider

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// Recorder records the kubelet's events about a pod, or about one of its
// containers, named by field path as the kubelet names them.
type Recorder struct{ events record.EventRecorder }

func NewRecorder(events record.EventRecorder) Recorder { return Recorder{events} }

func (r Recorder) Event(pod *v1.Pod, container, eventType, reason, msg string) {
	ref := &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
	if container != "" {
		ref.FieldPath = "spec.containers{" + container + "}"
		for _, c := range pod.Spec.InitContainers {
			if c.Name == container {
				ref.FieldPath = "spec.initContainers{" + container + "}"
			}
		}
	}
	r.events.Event(ref, eventType, reason, msg)
}

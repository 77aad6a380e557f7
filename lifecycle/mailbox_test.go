package lifecycle

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The mailbox hands each exit and probe verdict to the worker once, and at
// every turn the newest object, run with the allocated resources: a
// resize the node has not admitted does not reach the running spec.
func TestMailboxTake(t *testing.T) {
	pod := resizablePod(resources("100m", "200m", "64Mi", "128Mi"))
	w := NewPod(pod, Config{})
	w.SetAllocation(AllocationOf(pod))
	want := resized(pod, 0, resources("1", "1", "64Mi", "128Mi"))
	w.Update(want)
	w.Exited(ContainerInfo{ID: "id1", Name: "a", Exited: true})
	w.shared.probeResults = append(w.shared.probeResults, probeResult{name: "a", id: "id1"})

	m := w.shared.take()
	if m.desired != want || len(m.exits) != 1 || len(m.results) != 1 || m.terminating || m.stop != nil {
		t.Fatalf("first take %+v", m)
	}
	if got := m.pod.Spec.Containers[0].Resources; !sameResources(got, pod.Spec.Containers[0].Resources) {
		t.Fatalf("running spec has the resize not admitted: %v", got)
	}
	w.Stop(StopRequest{Reason: "Shutdown"})
	m = w.shared.take()
	if len(m.exits) != 0 || len(m.results) != 0 || m.stop == nil || m.stop.Reason != "Shutdown" {
		t.Fatalf("second take %+v", m)
	}
	// The stop stays asked for; a deletion is seen at every turn after.
	deleted := want.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	w.Update(deleted)
	if m = w.shared.take(); !m.terminating || m.stop == nil {
		t.Fatalf("after the deletion %+v", m)
	}
}

package podsync

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cond(t v1.PodConditionType, s v1.ConditionStatus) v1.PodCondition {
	return v1.PodCondition{Type: t, Status: s}
}

// The node's conditions come from its status, the rest as the API has them:
// a readiness gate set after the worker last saw the pod is not undone.
func TestMergeStatusKeepsOthersConditions(t *testing.T) {
	api := &v1.PodStatus{Conditions: []v1.PodCondition{
		cond(v1.PodReady, v1.ConditionFalse), cond("example.com/gate", v1.ConditionTrue), cond(v1.DisruptionTarget, v1.ConditionTrue),
	}}
	want := &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{
		cond(v1.PodReady, v1.ConditionTrue), cond("example.com/gate", v1.ConditionFalse),
	}}
	got := mergeStatus(api, want)
	byType := map[v1.PodConditionType]v1.ConditionStatus{}
	for _, c := range got.Conditions {
		if _, dup := byType[c.Type]; dup {
			t.Fatalf("condition %s twice: %v", c.Type, got.Conditions)
		}
		byType[c.Type] = c.Status
	}
	if byType[v1.PodReady] != v1.ConditionTrue || byType["example.com/gate"] != v1.ConditionTrue || byType[v1.DisruptionTarget] != v1.ConditionTrue {
		t.Fatalf("merged conditions = %v", got.Conditions)
	}
	if got.Phase != v1.PodRunning {
		t.Fatalf("phase = %s", got.Phase)
	}
	if want.Conditions[0].Status != v1.ConditionTrue || len(want.Conditions) != 2 {
		t.Fatal("mergeStatus changed its argument")
	}
}

// DisruptionTarget is shared with the node (eviction, shutdown): the
// node's replaces the API's.
func TestMergeStatusDisruptionTargetFromNode(t *testing.T) {
	api := &v1.PodStatus{Conditions: []v1.PodCondition{cond(v1.DisruptionTarget, v1.ConditionFalse)}}
	want := &v1.PodStatus{Conditions: []v1.PodCondition{cond(v1.DisruptionTarget, v1.ConditionTrue)}}
	got := mergeStatus(api, want)
	if len(got.Conditions) != 1 || got.Conditions[0].Status != v1.ConditionTrue {
		t.Fatalf("merged conditions = %v", got.Conditions)
	}
}

// A status equal to the API's but for sub-second times is not written
// again; a real change is; a terminal phase is never left.
func TestStatusToWrite(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	api := &v1.PodStatus{Phase: v1.PodRunning, StartTime: &metav1.Time{Time: at},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Time{Time: at}}}}}}
	want := api.DeepCopy()
	want.StartTime = &metav1.Time{Time: at.Add(300 * time.Millisecond)}
	want.ContainerStatuses[0].State.Running.StartedAt = metav1.Time{Time: at.Add(700 * time.Millisecond)}
	if _, ok := statusToWrite(api, want, false); ok {
		t.Fatal("a status the API has (to the second) is written again")
	}
	want.ContainerStatuses[0].Ready = true
	st, ok := statusToWrite(api, want, false)
	if !ok || !st.ContainerStatuses[0].Ready {
		t.Fatalf("a changed status is not written: %v %v", ok, st)
	}
	if !st.StartTime.Equal(&metav1.Time{Time: at}) {
		t.Fatalf("written start time %v is not normalized", st.StartTime)
	}
	ended := &v1.PodStatus{Phase: v1.PodSucceeded}
	if _, ok := statusToWrite(ended, want, false); ok {
		t.Fatal("a running status is written over a terminal one")
	}
	// A static pod's new run leaves its mirror's earlier terminal phase.
	if st, ok := statusToWrite(ended, want, true); !ok || st.Phase != v1.PodRunning {
		t.Fatalf("a static pod's new run is not written over its earlier run's end: %v %v", ok, st.Phase)
	}
	final := want.DeepCopy()
	final.Phase = v1.PodFailed
	if _, ok := statusToWrite(ended, final, false); !ok {
		t.Fatal("a terminal status is not written over another terminal one")
	}
}

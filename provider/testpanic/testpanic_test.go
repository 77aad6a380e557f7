package testpanic

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The annotation does nothing unless the hooks were enabled (the hidden
// flag); enabled, each named point panics once per pod.
func TestTestPanicHooks(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", Annotations: map[string]string{Annotation: "sync, logs"}}}
	panics := func(point string) (p bool) {
		defer func() { p = recover() != nil }()
		At(pod, point)
		return false
	}
	if panics("sync") {
		t.Fatal("panicked without the flag")
	}
	Enable()
	defer testPanics.enabled.Store(false)
	if !panics("sync") || !panics("logs") {
		t.Fatal("no panic at a named point")
	}
	if panics("sync") || panics("start") {
		t.Fatal("panicked twice, or at a point not named")
	}
}

package provider

import (
	"net/http"
	"net/http/httptest"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWithRecovery(t *testing.T) {
	h := withRecovery(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/containerLogs/ns/p/c", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("code %d, want 500", rec.Code)
	}
}

// The annotation does nothing unless the hooks were enabled (the hidden
// flag); enabled, each named point panics once per pod.
func TestTestPanicHooks(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", Annotations: map[string]string{TestPanicAnnotation: "sync, logs"}}}
	panics := func(point string) (p bool) {
		defer func() { p = recover() != nil }()
		testPanic(pod, point)
		return false
	}
	if panics("sync") {
		t.Fatal("panicked without the flag")
	}
	EnableTestPanicHooks()
	defer testPanics.enabled.Store(false)
	if !panics("sync") || !panics("logs") {
		t.Fatal("no panic at a named point")
	}
	if panics("sync") || panics("start") {
		t.Fatal("panicked twice, or at a point not named")
	}
}

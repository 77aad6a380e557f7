// Package testpanic makes hostlet panic at named points for a pod that asks
// for it, so tests can check that panics are contained. It is off unless
// Enable is called (the hidden flag --test-panic-hooks).
package testpanic

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

// Annotation, on a pod, names the points where hostlet panics once
// for that pod, comma-separated: "sync" (the pod worker), "start" (a
// container start), "exec" (the first exec: a probe or hook), "logs" (the
// copier of a kubelet API log request). It works only with the hidden flag
// --test-panic-hooks, which production never sets.
const Annotation = "hostlet.test/panic"

var testPanics struct {
	enabled atomic.Bool
	mu      sync.Mutex
	fired   map[string]bool
}

// Enable turns on Annotation (tests only).
func Enable() {
	testPanics.mu.Lock()
	testPanics.fired = map[string]bool{}
	testPanics.mu.Unlock()
	testPanics.enabled.Store(true)
	log.Warn("test panic hooks are on: pods can make hostlet panic (tests only)")
}

// At panics at point once per pod when the hooks are on and the pod
// asks for it.
func At(pod *v1.Pod, point string) {
	if !testPanics.enabled.Load() || pod == nil {
		return
	}
	want := false
	for _, p := range strings.Split(pod.Annotations[Annotation], ",") {
		want = want || strings.TrimSpace(p) == point
	}
	if !want {
		return
	}
	testPanics.mu.Lock()
	k := string(pod.UID) + "/" + point
	fired := testPanics.fired[k]
	testPanics.fired[k] = true
	testPanics.mu.Unlock()
	if !fired {
		panic(fmt.Sprintf("test panic hook %q", point))
	}
}

package provider

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

// guardedRuntime turns a panic while preparing a pod's sandbox or starting
// one of its containers into that step's error, so the pod shows it where
// the kubelet shows a failed start (the container waiting with
// RunContainerError, a FailedCreatePodSandBox event) and the worker retries
// with its usual back-off. Panics elsewhere reach the worker's own guard
// (lifecycle.Pod.Supervise).
type guardedRuntime struct {
	lifecycle.Runtime
	pod *v1.Pod
}

func (g guardedRuntime) PrepareSandbox(ctx context.Context, pod *v1.Pod) (ips []string, err error) {
	defer crash.Recover(podLog(pod), func(msg string) { ips, err = nil, fmt.Errorf("panic: %s", msg) })
	return g.Runtime.PrepareSandbox(ctx, pod)
}

func (g guardedRuntime) StartContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int) (info lifecycle.ContainerInfo, err error) {
	// Outside the guard: the test hook for a panic of the worker itself.
	testPanic(pod, "sync")
	defer crash.Recover(podLog(pod).WithField("container", c.Name), func(msg string) {
		info, err = lifecycle.ContainerInfo{}, &lifecycle.Failure{Reason: "RunContainerError", Message: "panic: " + msg}
	})
	testPanic(pod, "start")
	return g.Runtime.StartContainer(ctx, pod, c, attempt)
}

func (g guardedRuntime) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	// Exec runs probes and hooks: their goroutines recover.
	testPanic(g.pod, "exec")
	return g.Runtime.Exec(ctx, id, cmd, timeout)
}

// TestPanicAnnotation, on a pod, names the points where hostlet panics once
// for that pod, comma-separated: "sync" (the pod worker), "start" (a
// container start), "exec" (the first exec: a probe or hook), "logs" (the
// copier of a kubelet API log request). It works only with the hidden flag
// --test-panic-hooks, which production never sets.
const TestPanicAnnotation = "hostlet.test/panic"

var testPanics struct {
	enabled atomic.Bool
	mu      sync.Mutex
	fired   map[string]bool
}

// EnableTestPanicHooks turns on TestPanicAnnotation (tests only).
func EnableTestPanicHooks() {
	testPanics.mu.Lock()
	testPanics.fired = map[string]bool{}
	testPanics.mu.Unlock()
	testPanics.enabled.Store(true)
	log.Warn("test panic hooks are on: pods can make hostlet panic (tests only)")
}

// testPanic panics at point once per pod when the hooks are on and the pod
// asks for it.
func testPanic(pod *v1.Pod, point string) {
	if !testPanics.enabled.Load() || pod == nil {
		return
	}
	want := false
	for _, p := range strings.Split(pod.Annotations[TestPanicAnnotation], ",") {
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

// recoverSync keeps a panic in a pod event from virtual-kubelet's pod
// controller (create, update, delete) from taking the node down: it is
// logged, and the event is answered with an error, which the controller
// retries with its back-off. Deferred with the handler's named error.
func recoverSync(pod *v1.Pod, op string, err *error) {
	crash.Handle(recover(), podLog(pod).WithField("op", op), func(msg string) {
		*err = fmt.Errorf("panic while handling the %s of pod %s: %s", op, key(pod.Namespace, pod.Name), msg)
	})
}

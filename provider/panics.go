package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/testpanic"
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
	defer crash.Recover(lifecycle.PodLogger(pod), func(msg string) { ips, err = nil, fmt.Errorf("panic: %s", msg) })
	return g.Runtime.PrepareSandbox(ctx, pod)
}

func (g guardedRuntime) StartContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int) (info lifecycle.ContainerInfo, err error) {
	// Outside the guard: the test hook for a panic of the worker itself.
	testpanic.At(pod, "sync")
	defer crash.Recover(lifecycle.PodLogger(pod).WithField("container", c.Name), func(msg string) {
		info, err = lifecycle.ContainerInfo{}, &lifecycle.Failure{Reason: "RunContainerError", Message: "panic: " + msg}
	})
	testpanic.At(pod, "start")
	return g.Runtime.StartContainer(ctx, pod, c, attempt)
}

func (g guardedRuntime) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	// Exec runs probes and hooks: their goroutines recover.
	testpanic.At(g.pod, "exec")
	return g.Runtime.Exec(ctx, id, cmd, timeout)
}

// recoverSync keeps a panic while a pod event is handled (podsync's sync
// or remove) from taking the node down: it is logged, and the event is
// answered with an error, which podsync retries with its back-off.
// Deferred with the handler's named error.
func recoverSync(pod *v1.Pod, op string, err *error) {
	crash.Handle(recover(), lifecycle.PodLogger(pod).WithField("op", op), func(msg string) {
		*err = fmt.Errorf("panic while handling the %s of pod %s: %s", op, key(pod.Namespace, pod.Name), msg)
	})
}

package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Kubectl runs the built kubectl with the admin kubeconfig and returns its
// stdout; on failure the error carries stderr.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "kubectl"),
		append([]string{"--kubeconfig", c.adminKubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %v: %w: %s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

// NewNamespace creates namespace e2e-<random>, waits until it has its
// "default" ServiceAccount (pods are rejected before that) and deletes it
// when the test ends.
func (c *Cluster) NewNamespace(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "e2e-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Not waiting: finalization needs the node to confirm pod deletion
		// and the next test does not depend on it.
		_ = c.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	sel := fields.OneTermEqualSelector("metadata.name", "default").String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.client.CoreV1().ServiceAccounts(name).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.client.CoreV1().ServiceAccounts(name).Watch(ctx, o)
		},
	}
	if _, err := watchtools.UntilWithSync(ctx, lw, &v1.ServiceAccount{}, nil, func(e watch.Event) (bool, error) {
		return e.Type != watch.Deleted, nil
	}); err != nil {
		t.Fatalf("namespace %s: waiting for ServiceAccount default: %v", name, err)
	}
	return name
}

// CreatePod creates pod (its Namespace must be set) and fails the test on
// error.
func (c *Cluster) CreatePod(t testing.TB, pod *v1.Pod) *v1.Pod {
	t.Helper()
	if pod.Namespace == "" {
		t.Fatalf("CreatePod %s: pod.Namespace is empty", pod.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := c.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return created
}

// WaitForPod watches pod ns/name until cond returns true (returns the pod),
// cond returns an error, or timeout/ctx expires. On failure the last seen
// pod is returned with an error describing its status. The pod need not
// exist yet.
func (c *Cluster) WaitForPod(ctx context.Context, ns, name string, timeout time.Duration, cond func(*v1.Pod) (bool, error)) (*v1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.client.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	var last *v1.Pod
	ev, err := watchtools.UntilWithSync(ctx, lw, &v1.Pod{}, nil, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*v1.Pod)
		if !ok {
			return false, nil
		}
		last = p
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("pod was deleted")
		}
		return cond(p)
	})
	if err != nil {
		if last == nil {
			return nil, fmt.Errorf("pod %s/%s: %w (never seen)", ns, name, err)
		}
		return last, fmt.Errorf("pod %s/%s: %w; %s", ns, name, err, DescribePodStatus(last))
	}
	return ev.Object.(*v1.Pod), nil
}

// DescribePodStatus summarises phase, conditions and container states for
// error messages.
func DescribePodStatus(p *v1.Pod) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "phase=%s node=%q reason=%q message=%q", p.Status.Phase, p.Spec.NodeName, p.Status.Reason, p.Status.Message)
	for _, cd := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s", cd.Type, cd.Status)
		if cd.Reason != "" {
			fmt.Fprintf(&b, "(%s: %s)", cd.Reason, cd.Message)
		}
	}
	for _, group := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range group {
			fmt.Fprintf(&b, " [%s ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, " waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Running != nil:
				b.WriteString(" running")
			case s.State.Terminated != nil:
				fmt.Fprintf(&b, " terminated %s exit=%d: %s", s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
			}
			b.WriteString("]")
		}
	}
	return b.String()
}

// PodPhase is true once the pod is in phase. It fails as soon as the pod
// reaches a different terminal phase, which it can never leave.
func PodPhase(phase v1.PodPhase) func(*v1.Pod) (bool, error) {
	return func(p *v1.Pod) (bool, error) {
		if p.Status.Phase == phase {
			return true, nil
		}
		if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			return false, fmt.Errorf("pod reached terminal phase %s, wanted %s", p.Status.Phase, phase)
		}
		return false, nil
	}
}

// PodRunning is true once the pod is Running (fails if it terminates).
var PodRunning = PodPhase(v1.PodRunning)

// PodSucceeded is true once the pod Succeeded (fails if it Failed).
var PodSucceeded = PodPhase(v1.PodSucceeded)

// PodReady is true once the pod's Ready condition is True (fails if it
// terminates).
func PodReady(p *v1.Pod) (bool, error) {
	if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return false, fmt.Errorf("pod reached terminal phase %s, wanted Ready", p.Status.Phase)
	}
	for _, cd := range p.Status.Conditions {
		if cd.Type == v1.PodReady {
			return cd.Status == v1.ConditionTrue, nil
		}
	}
	return false, nil
}

// PodTerminated is true once the pod Succeeded or Failed.
func PodTerminated(p *v1.Pod) (bool, error) {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed, nil
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func busybox(ns, name string, cmd ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever,
			Containers:    []v1.Container{{Name: "c", Image: images.BusyboxRef, Command: cmd}},
		},
	}
}

func skipIfNoCluster(t *testing.T) {
	if cluster == nil {
		t.Skip("no cluster (needs root)")
	}
}

func waitPhase(t *testing.T, ns, name string, phase v1.PodPhase) *v1.Pod {
	t.Helper()
	p, err := cluster.WaitForPod(ctxT(t), ns, name, 2*time.Minute, harness.PodPhase(phase))
	if err != nil {
		t.Fatalf("pod %s/%s never reached %s: %v", ns, name, phase, err)
	}
	return p
}

// A pod bound to the node directly and one placed by the scheduler both run
// to completion in containerd, with a pod IP from CNI and their logs served.
func TestPodRunsToCompletion(t *testing.T) {
	skipIfNoCluster(t)
	for _, scheduled := range []bool{false, true} {
		name := "direct"
		if scheduled {
			name = "scheduled"
		}
		t.Run(name, func(t *testing.T) {
			ns := cluster.NewNamespace(t)
			pod := busybox(ns, "hello", "sh", "-c", "echo hi; sleep 2")
			if !scheduled {
				pod.Spec.NodeName = nodeName
			}
			pod = cluster.CreatePod(t, pod)
			running := waitPhase(t, ns, pod.Name, v1.PodRunning)
			if running.Spec.NodeName != nodeName {
				t.Fatalf("pod ran on %q", running.Spec.NodeName)
			}
			if running.Status.PodIP == "" || running.Status.PodIP == "127.0.0.1" {
				t.Fatalf("pod IP %q is not from CNI", running.Status.PodIP)
			}
			cs := running.Status.ContainerStatuses[0]
			if !strings.HasPrefix(cs.ContainerID, "containerd://") || cs.State.Running == nil {
				t.Fatalf("container status %+v", cs)
			}
			id := strings.TrimPrefix(cs.ContainerID, "containerd://")
			if _, err := cluster.ContainerdClient().LoadContainer(ctxT(t), id); err != nil {
				t.Fatalf("container %s not in containerd: %v", id, err)
			}
			t.Logf("pod %s/%s running: ip=%s container=%s", ns, pod.Name, running.Status.PodIP, id[:12])
			done := waitPhase(t, ns, pod.Name, v1.PodSucceeded)
			term := done.Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
				t.Fatalf("terminated state %+v", term)
			}
			out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name)
			if err != nil || out != "hi\n" {
				t.Fatalf("kubectl logs = %q, %v", out, err)
			}
		})
	}
}

func TestExec(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, busybox(ns, "sleeper", "sleep", "3600"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "exec", pod.Name, "--", "sh", "-c", "echo from-exec; hostname")
	if err != nil || out != "from-exec\nsleeper\n" {
		t.Fatalf("kubectl exec = %q, %v", out, err)
	}
	if _, err := cluster.Kubectl(ctxT(t), "-n", ns, "exec", pod.Name, "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit code 3") {
		t.Fatalf("exit code not propagated: %v", err)
	}
}

// Deleting a pod stops and removes its containers.
func TestDeleteRemovesContainers(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, busybox(ns, "victim", "sleep", "3600"))
	running := waitPhase(t, ns, pod.Name, v1.PodRunning)
	id := strings.TrimPrefix(running.Status.ContainerStatuses[0].ContainerID, "containerd://")
	grace := int64(2)
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cluster.ContainerdClient().LoadContainer(ctxT(t), id)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still in containerd after the pod was deleted", id)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitGone waits until the pod object is deleted.
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not removed: %v", ns, name, err)
	}
}

// taskOf is the containerd task of a container status's container.
func taskOf(t *testing.T, st *v1.ContainerStatus) containerd.Task {
	t.Helper()
	ctx := namespaces.WithNamespace(ctxT(t), harness.ContainerdNamespace)
	c, err := cluster.ContainerdClient().LoadContainer(ctx, strings.TrimPrefix(st.ContainerID, "containerd://"))
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod runs on the runtime its RuntimeClass names and on no other. The
// node's containerd has the handlers "traced" (runc's shim running a runc
// wrapper that logs each call, with a root of its own) and "kata" (a
// runtime type hostlet refuses). A pod of a traced RuntimeClass runs under
// the wrapper (its log and its root have the container), with the
// RuntimeClass's overhead in its pod cgroup, in a shim of its own
// handler; a default pod beside it is not the wrapper's; a pod whose
// handler containerd lacks (runsc) or hostlet refuses (kata) stays Pending
// with FailedCreatePodSandBox and no container; the node lists its
// handlers in status.runtimeHandlers. (Debian 12's crun 1.8 would be the
// real second runtime, but it refuses containerd 2.2's OCI spec version
// 1.2.1: "unknown version specified".)
func TestRuntimeClass(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-rc"
	dir := filepath.Join(cluster.Dir(), "containerd-rc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runc, traceLog, tracedRoot := filepath.Join(cluster.BinDir(), "runc"), filepath.Join(dir, "traced.log"), filepath.Join(dir, "traced-root")
	wrapper := filepath.Join(dir, "traced-runc")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %q\nexec %q \"$@\"\n", traceLog, runc)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := cluster.AddContainerd(ctxT(t), "rc", harness.CRIConfig{SandboxImage: "registry.k8s.io/pause:3.10", Runtimes: []harness.CRIRuntime{
		{Name: "traced", Type: "io.containerd.runc.v2", BinaryName: wrapper, Root: tracedRoot},
		{Name: "kata", Type: "io.containerd.kata.v2"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if err := d.ImportImage(ctxT(t), localImage(t, images.BusyboxRef).Archive); err != nil {
		t.Fatal(err)
	}
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{"--container-runtime-endpoint", "unix://" + d.Socket()}})

	t.Run("node status", func(t *testing.T) {
		handlerNames := func(n *v1.Node) []string {
			var out []string
			for _, h := range n.Status.RuntimeHandlers {
				if h.Features == nil || h.Features.RecursiveReadOnlyMounts == nil || h.Features.UserNamespaces == nil {
					return nil
				}
				out = append(out, h.Name)
			}
			return out
		}
		// The CRI plugin's runtimes, the default as "", less kata.
		n, err := cluster.WaitForNode(ctxT(t), name, time.Minute, func(n *v1.Node) (bool, error) {
			return slices.Equal(handlerNames(n), []string{"", "runc", "traced"}), nil
		})
		if err != nil {
			t.Fatalf("node %s runtime handlers %+v: %v", name, n.Status.RuntimeHandlers, err)
		}
		// Without the CRI plugin (the shared node's containerd): the default runc.
		main, err := cluster.WaitForNode(ctxT(t), nodeName, time.Minute, func(n *v1.Node) (bool, error) {
			return slices.Equal(handlerNames(n), []string{"", "runc"}), nil
		})
		if err != nil {
			t.Fatalf("node %s runtime handlers %+v: %v", nodeName, main.Status.RuntimeHandlers, err)
		}
	})

	ns := cluster.NewNamespace(t)
	class := func(handler string, overhead v1.ResourceList) string {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + handler}, Handler: handler}
		if overhead != nil {
			rc.Overhead = &nodev1.Overhead{PodFixed: overhead}
		}
		if _, err := cluster.Client().NodeV1().RuntimeClasses().Create(ctxT(t), rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Client().NodeV1().RuntimeClasses().Delete(context.Background(), rc.Name, metav1.DeleteOptions{})
		})
		return rc.Name
	}
	pod := func(podName string, class string) *v1.Pod {
		p := busybox(ns, podName, "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
		p.Spec.NodeName = name
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Limits: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}}
		return p
	}
	ctx := namespaces.WithNamespace(ctxT(t), harness.ContainerdNamespace)
	task := func(p *v1.Pod) containerd.Task {
		t.Helper()
		c, err := d.Client().LoadContainer(ctx, strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://"))
		if err != nil {
			t.Fatal(err)
		}
		task, err := c.Task(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	// traced says whether the wrapper created container id, and what its
	// runc root holds of it.
	traced := func(id string) (created bool, state string) {
		b, _ := os.ReadFile(traceLog)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); slices.Contains(f, "create") && slices.Contains(f, id) {
				created = true
			}
		}
		// runc's shim keeps a namespace's containers below the root.
		out, err := exec.Command(runc, "--root", filepath.Join(tracedRoot, harness.ContainerdNamespace), "state", id).CombinedOutput()
		if err != nil {
			return created, ""
		}
		var st struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(out, &st)
		return created, st.Status
	}

	t.Run("traced", func(t *testing.T) {
		rc := class("traced", v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("32Mi")})
		cluster.CreatePod(t, pod("on-traced", rc))
		cluster.CreatePod(t, pod("on-default", ""))
		onTraced, onDefault := waitReady(t, ns, "on-traced"), waitReady(t, ns, "on-default")
		tracedID := strings.TrimPrefix(onTraced.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if created, st := traced(tracedID); !created || st != "running" {
			t.Errorf("the traced pod's container: created by the wrapper %v, %q in its root", created, st)
		}
		defaultID := strings.TrimPrefix(onDefault.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if created, st := traced(defaultID); created || st != "" {
			t.Errorf("the default pod's container: created by the wrapper %v, %q in its root", created, st)
		}
		// A shim runs one handler's containers.
		tracedShim, err := parentOf(int(task(onTraced).Pid()))
		if err != nil {
			t.Fatal(err)
		}
		defaultShim, err := parentOf(int(task(onDefault).Pid()))
		if err != nil {
			t.Fatal(err)
		}
		if tracedShim == defaultShim {
			t.Errorf("the traced and the default pod share shim %d", tracedShim)
		}
		// The RuntimeClass admission plugin set the overhead; the pod
		// cgroup has it on top of the container's limits (Guaranteed:
		// directly below kubepods).
		if o := onTraced.Spec.Overhead; o.Memory().Value() != 32<<20 {
			t.Fatalf("pod overhead %v: the RuntimeClass admission plugin did not set it", o)
		}
		podCgroup := filepath.Join(h.CgroupRoot(), "kubepods", "pod"+string(onTraced.UID))
		if cgroups.IsCgroup2UnifiedMode() {
			if got := readCgroupFile(t, cgroupDir("", podCgroup), "memory.max"); got != fmt.Sprint(96<<20) {
				t.Errorf("pod cgroup memory.max = %s, want 64Mi + 32Mi overhead", got)
			}
			if got := readCgroupFile(t, cgroupDir("", podCgroup), "cpu.max"); got != "15000 100000" {
				t.Errorf("pod cgroup cpu.max = %s, want 100m + 50m overhead", got)
			}
		} else {
			if got := readCgroupFile(t, cgroupDir("memory", podCgroup), "memory.limit_in_bytes"); got != fmt.Sprint(96<<20) {
				t.Errorf("pod cgroup memory.limit_in_bytes = %s, want 64Mi + 32Mi overhead", got)
			}
			if got := readCgroupFile(t, cgroupDir("cpu", podCgroup), "cpu.cfs_quota_us"); got != "15000" {
				t.Errorf("pod cgroup cpu.cfs_quota_us = %s, want 100m + 50m overhead", got)
			}
		}
		if out := execIn(t, ns, "on-traced", "c", "echo", "hi"); strings.TrimSpace(out) != "hi" {
			t.Errorf("exec in the traced pod: %q", out)
		}
		// A restarted hostlet runs the pod's next container with the
		// handler its sandbox recorded.
		if err := h.Restart(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		// PID 1 ending kills everything left in the container's PID
		// namespace, the exec itself when it has not exited yet: its exit
		// 137 is the kernel's, the restart below is what is checked.
		_, _ = cluster.Kubectl(ctxT(t), "-n", ns, "exec", "on-traced", "-c", "c", "--", "kill", "1")
		again := waitFor(t, ns, "on-traced", 2*time.Minute, "its container restarted", func(p *v1.Pod) bool {
			st := p.Status.ContainerStatuses
			return len(st) == 1 && st[0].RestartCount == 1 && st[0].State.Running != nil
		})
		againID := strings.TrimPrefix(again.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if created, st := traced(againID); againID == tracedID || !created || st != "running" {
			t.Errorf("the restarted container %s: created by the wrapper %v, %q in its root", againID, created, st)
		}
		deletePod(t, ns, "on-traced")
		waitGone(t, ns, "on-traced")
		pollUntil(t, time.Minute, "the traced container to leave the wrapper's root", func() bool {
			_, st := traced(tracedID)
			return st == ""
		})
	})

	for _, tc := range []struct{ handler, message string }{
		{"runsc", `no runtime for "runsc" is configured`},
		{"kata", `runtime type "io.containerd.kata.v2"`},
	} {
		t.Run(tc.handler, func(t *testing.T) {
			p := cluster.CreatePod(t, pod("on-"+tc.handler, class(tc.handler, nil)))
			msg := waitEvent(t, ns, p.Name, "FailedCreatePodSandBox")
			if !strings.HasPrefix(msg, "Failed to create pod sandbox: ") || !strings.Contains(msg, tc.message) {
				t.Errorf("event %q, want the sandbox failure naming %s", msg, tc.message)
			}
			got, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != v1.PodPending {
				t.Errorf("phase %s, want Pending", got.Status.Phase)
			}
			if len(got.Status.ContainerStatuses) != 1 {
				t.Errorf("container statuses %+v, want the container's", got.Status.ContainerStatuses)
			}
			for _, st := range got.Status.ContainerStatuses {
				if st.ContainerID != "" || st.State.Waiting == nil || st.State.Waiting.Reason != "ContainerCreating" {
					t.Errorf("container %s: %+v, want Waiting ContainerCreating and no container", st.Name, st.State)
				}
			}
			cs, err := d.Client().Containers(ctx, fmt.Sprintf("labels.%q==%s", "io.kubernetes.pod.uid", p.UID))
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) != 0 {
				t.Errorf("%d containers made for the pod", len(cs))
			}
			deletePod(t, ns, p.Name)
			waitGone(t, ns, p.Name)
		})
	}
}

package e2e

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// debugTarget is a pod whose container writes a file into a shared
// emptyDir and sleeps with a marker an ephemeral container can look for.
func debugTarget(ns, name string) *v1.Pod {
	pod := busybox(ns, name, "sh", "-c", "echo from-target > /shared/f; exec sleep 3601")
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Volumes = []v1.Volume{{Name: "shared", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	return pod
}

// addEphemeral adds an ephemeral container through the ephemeralcontainers
// subresource, as kubectl debug does.
func addEphemeral(t *testing.T, ns, pod string, ec v1.EphemeralContainer) {
	t.Helper()
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
	if _, err := cluster.Client().CoreV1().Pods(ns).UpdateEphemeralContainers(ctxT(t), pod, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("adding ephemeral container %s: %v", ec.Name, err)
	}
}

func ephemeralStatus(p *v1.Pod, name string) *v1.ContainerStatus {
	for i := range p.Status.EphemeralContainerStatuses {
		if st := &p.Status.EphemeralContainerStatuses[i]; st.Name == name {
			return st
		}
	}
	return nil
}

func waitEphemeral(t *testing.T, ns, pod, name, what string, cond func(*v1.ContainerStatus) bool) *v1.Pod {
	t.Helper()
	p, err := cluster.WaitForPod(ctxT(t), ns, pod, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		st := ephemeralStatus(p, name)
		return st != nil && cond(st), nil
	})
	if err != nil {
		t.Fatalf("ephemeral container %s never %s: %v", name, what, err)
	}
	return p
}

// An ephemeral container added through the subresource runs in the pod's
// sandbox: it mounts the pod's volume, shares the target's PID namespace
// (sees its process), takes exec and serves logs. One that exits is never
// restarted, whatever the pod's restart policy, nor by a restarted hostlet,
// which adopts the running one; that is stopped with the pod and the final
// status shows it terminated.
func TestEphemeralContainer(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, debugTarget(ns, "target"))
	waitReady(t, ns, pod.Name)

	addEphemeral(t, ns, pod.Name, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "dbg", Image: images.BusyboxRef, Command: []string{"sleep", "3602"},
			VolumeMounts: []v1.VolumeMount{{Name: "shared", MountPath: "/mnt"}},
		},
		TargetContainerName: "c",
	})
	p := waitEphemeral(t, ns, pod.Name, "dbg", "running", func(st *v1.ContainerStatus) bool { return st.State.Running != nil })
	if st := ephemeralStatus(p, "dbg"); st.Ready || st.ContainerID == "" || st.Image != images.BusyboxRef {
		t.Errorf("running ephemeral status %+v", st)
	}
	if ps := execIn(t, ns, pod.Name, "dbg", "ps", "-o", "args"); !strings.Contains(ps, "sleep 3601") || !strings.Contains(ps, "sleep 3602") {
		t.Errorf("ps in the ephemeral container does not show the target's process:\n%s", ps)
	}
	if got := execIn(t, ns, pod.Name, "dbg", "cat", "/mnt/f"); got != "from-target\n" {
		t.Errorf("the pod's volume in the ephemeral container: %q", got)
	}
	// One namespace, not a view: the target sees the ephemeral process too.
	if ps := execIn(t, ns, pod.Name, "c", "ps", "-o", "args"); !strings.Contains(ps, "sleep 3602") {
		t.Errorf("the target does not see the ephemeral container's process:\n%s", ps)
	}

	addEphemeral(t, ns, pod.Name, v1.EphemeralContainer{EphemeralContainerCommon: v1.EphemeralContainerCommon{
		Name: "once", Image: images.BusyboxRef, Command: []string{"sh", "-c", "echo once-ran; exit 3"},
	}})
	waitEphemeral(t, ns, pod.Name, "once", "terminated", func(st *v1.ContainerStatus) bool { return st.State.Terminated != nil })
	// A regular container would be restarted 10 s after such an exit.
	time.Sleep(15 * time.Second)
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := ephemeralStatus(p, "once")
	if term := st.State.Terminated; term == nil || term.ExitCode != 3 || term.Reason != "Error" || st.RestartCount != 0 {
		t.Fatalf("exited ephemeral container %+v", st)
	}
	if p.Status.Phase != v1.PodRunning || !p.Status.ContainerStatuses[0].Ready {
		t.Fatalf("pod after its ephemeral container exited: %s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	}
	if out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name, "-c", "once"); err != nil || out != "once-ran\n" {
		t.Fatalf("kubectl logs -c once = %q, %v", out, err)
	}

	// A restarted hostlet adopts both as they are: neither runs again.
	dbgID := ephemeralStatus(p, "dbg").ContainerID
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := execIn(t, ns, pod.Name, "dbg", "cat", "/mnt/f"); got != "from-target\n" {
		t.Errorf("exec in the adopted ephemeral container: %q", got)
	}
	if p, err = cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := ephemeralStatus(p, "dbg"); st.ContainerID != dbgID || st.State.Running == nil {
		t.Fatalf("adopted ephemeral container %+v, was %s", st, dbgID)
	}
	if st := ephemeralStatus(p, "once"); st.State.Terminated == nil || st.RestartCount != 0 {
		t.Fatalf("exited ephemeral container after the restart %+v", st)
	}

	// Deleted, the pod stops the running ephemeral container: its last
	// object shows it terminated.
	w, err := cluster.Client().CoreV1().Pods(ns).Watch(ctxT(t), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *v1.Pod
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*v1.Pod); ok {
			last = p
		}
		if ev.Type == watch.Deleted {
			break
		}
	}
	if last == nil {
		t.Fatal("no final object of the pod")
	}
	if st := ephemeralStatus(last, "dbg"); st == nil || st.State.Terminated == nil {
		t.Fatalf("final ephemeral status %+v", last.Status.EphemeralContainerStatuses)
	}
}

// kubectl debug -it --target, in a terminal script(1) gives kubectl: the
// shell answers, sees the target's process, and exits; the ephemeral
// container is then terminated and stays so.
func TestEphemeralKubectlDebug(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, debugTarget(ns, "target"))
	waitReady(t, ns, pod.Name)
	cmd, stdin, out := kubectlTTY(t, "-n "+ns+" debug -it target --image="+images.BusyboxRef+" --target=c --container=debugger -- sh")
	waitShell(t, stdin, out, "kubectl debug -it", "debug")
	_, _ = io.WriteString(stdin, "ps -o args | grep -c '^sleep 360[1]'\n")
	pollUntil(t, time.Minute, "ps in the debug shell", func() bool { return strings.Contains(out.String(), "\n1\r\n") })
	_, _ = io.WriteString(stdin, "exit 0\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kubectl debug -it: %v (%q)", err, out.String())
	}
	waitEphemeral(t, ns, pod.Name, "debugger", "terminated", func(st *v1.ContainerStatus) bool {
		return st.State.Terminated != nil && st.State.Terminated.ExitCode == 0
	})
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
	if err != nil || p.Status.Phase != v1.PodRunning {
		t.Fatalf("target pod after the debug session: %v %v", p.Status.Phase, err)
	}
}

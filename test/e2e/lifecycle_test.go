package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

func status(p *v1.Pod, name string) v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for _, s := range list {
			if s.Name == name {
				return s
			}
		}
	}
	return v1.ContainerStatus{}
}

func TestRestartPolicies(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	for _, tc := range []struct {
		policy v1.RestartPolicy
		code   string
		phase  v1.PodPhase
	}{
		{v1.RestartPolicyNever, "3", v1.PodFailed},
		{v1.RestartPolicyNever, "0", v1.PodSucceeded},
		{v1.RestartPolicyOnFailure, "0", v1.PodSucceeded},
	} {
		name := strings.ToLower(string(tc.policy)) + "-" + tc.code
		pod := busybox(ns, name, "sh", "-c", "exit "+tc.code)
		pod.Spec.RestartPolicy = tc.policy
		cluster.CreatePod(t, pod)
		p := waitPhase(t, ns, name, tc.phase)
		if st := status(p, "c"); st.RestartCount != 0 || st.State.Terminated == nil {
			t.Errorf("%s: status %+v", name, st)
		}
	}
	// OnFailure and Always restart a failing container.
	for _, policy := range []v1.RestartPolicy{v1.RestartPolicyOnFailure, v1.RestartPolicyAlways} {
		name := strings.ToLower(string(policy)) + "-crash"
		pod := busybox(ns, name, "sh", "-c", "exit 1")
		pod.Spec.RestartPolicy = policy
		cluster.CreatePod(t, pod)
		p := waitFor(t, ns, name, time.Minute, "restarted", func(p *v1.Pod) bool { return restarts(p) >= 1 })
		if p.Status.Phase != v1.PodRunning && p.Status.Phase != v1.PodPending {
			t.Errorf("%s: phase %s while restarting", name, p.Status.Phase)
		}
	}
}

// What the API shows of a crash loop: the waiting reason CrashLoopBackOff
// with the kubelet's message, and its BackOff event. The schedule itself
// (at once, 10 s, 20 s ... 300 s, reset after 10 min) is lifecycle's
// scenario tests' on a fake clock.
func TestCrashLoopBackOffSchedule(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "crash", "sh", "-c", "exit 1")
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	cluster.CreatePod(t, pod)
	var backoffMsg string
	_, err := cluster.WaitForPod(ctxT(t), ns, "crash", 2*time.Minute, func(p *v1.Pod) (bool, error) {
		if w := status(p, "c").State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			backoffMsg = w.Message
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CrashLoopBackOff not seen: %v", err)
	}
	want := "back-off 10s restarting failed container=c pod=crash_" + ns
	if !strings.HasPrefix(backoffMsg, want) {
		t.Fatalf("CrashLoopBackOff message %q, want prefix %q", backoffMsg, want)
	}
	expectEvent(t, ns, "crash", "BackOff: Back-off restarting failed container c in pod crash_"+ns)
}

func TestContainerRestartRules(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	never := v1.ContainerRestartPolicyNever
	pod := busybox(ns, "rules", "sh", "-c", "if [ -f /data/ran ]; then exit 0; fi; touch /data/ran; exit 42")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	c.RestartPolicy = &never
	c.RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	other := v1.Container{Name: "other", Image: c.Image, Command: []string{"sh", "-c", "exit 1"}, RestartPolicy: &never,
		RestartPolicyRules: c.RestartPolicyRules}
	pod.Spec.Containers = append(pod.Spec.Containers, other)
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "rules", v1.PodFailed)
	if st := status(p, "c"); st.RestartCount != 1 || st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
		t.Errorf("exit 42 should restart once then complete: %+v", st)
	}
	if st := status(p, "other"); st.RestartCount != 0 {
		t.Errorf("exit 1 is not in the rule and must not restart: %+v", st)
	}

	// A container policy overrides the pod's.
	pod = busybox(ns, "override", "sh", "-c", "exit 1")
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Containers[0].RestartPolicy = &never
	cluster.CreatePod(t, pod)
	p = waitPhase(t, ns, "override", v1.PodFailed)
	if restarts(p) != 0 {
		t.Errorf("container restartPolicy Never was overridden: %d restarts", restarts(p))
	}
}

func TestInitContainers(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "init", "cat", "/data/order")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	mount := []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Containers[0].VolumeMounts = mount
	for _, n := range []string{"one", "two", "three"} {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{
			Name: n, Image: pod.Spec.Containers[0].Image, Command: []string{"sh", "-c", "echo " + n + " >> /data/order"}, VolumeMounts: mount,
		})
	}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "init", v1.PodSucceeded)
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", "init")
	if err != nil || out != "one\ntwo\nthree\n" {
		t.Fatalf("init order: %q %v", out, err)
	}

	fail := busybox(ns, "initfail", "echo", "main")
	fail.Spec.InitContainers = []v1.Container{{Name: "bad", Image: fail.Spec.Containers[0].Image, Command: []string{"sh", "-c", "exit 7"}}}
	cluster.CreatePod(t, fail)
	p := waitPhase(t, ns, "initfail", v1.PodFailed)
	if st := status(p, "c"); st.State.Waiting == nil || st.State.Waiting.Reason != "PodInitializing" {
		t.Errorf("main container ran after a failed init: %+v", st)
	}
	if st := status(p, "bad"); st.State.Terminated == nil || st.State.Terminated.ExitCode != 7 {
		t.Errorf("init status %+v", st)
	}
}

func TestSidecar(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	always := v1.ContainerRestartPolicyAlways
	pod := busybox(ns, "sidecar", "sh", "-c", "test -f /data/sidecar-up && sleep 3")
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	mount := []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Containers[0].VolumeMounts = mount
	pod.Spec.InitContainers = []v1.Container{{
		Name: "side", Image: pod.Spec.Containers[0].Image, RestartPolicy: &always, VolumeMounts: mount,
		Command: []string{"sh", "-c", "touch /data/sidecar-up; sleep 3600"},
	}}
	cluster.CreatePod(t, pod)
	// The sidecar is up before the main container and the pod completes
	// although the sidecar never exits by itself.
	p := waitPhase(t, ns, "sidecar", v1.PodSucceeded)
	if st := status(p, "c"); st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
		t.Fatalf("main container did not see the sidecar first: %+v", st)
	}

	// A sidecar that is killed is restarted.
	pod = busybox(ns, "sidecar2", "sleep", "3600")
	pod.Spec.InitContainers = []v1.Container{{Name: "side", Image: pod.Spec.Containers[0].Image, RestartPolicy: &always, Command: []string{"sleep", "3600"}}}
	cluster.CreatePod(t, pod)
	p = waitPhase(t, ns, "sidecar2", v1.PodRunning)
	// Kill the sidecar's process from outside, through containerd.
	side := status(p, "side")
	if err := taskOf(t, &side).Kill(ctxT(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ns, "sidecar2", time.Minute, "sidecar restarted", func(p *v1.Pod) bool { return status(p, "side").RestartCount >= 1 })
}

// A pod update that changes a running container's image (kubectl set image)
// restarts it with the new image, whatever the restart policy, as the
// kubelet does ("Container app definition changed, will be restarted"):
// a main container of a restartPolicy Never pod and a sidecar.
func TestImageUpdateRestarts(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	always := v1.ContainerRestartPolicyAlways
	pod := testapp(ns, "setimage")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	// The sidecar serves on a port of its own: both share the pod's network.
	pod.Spec.InitContainers = []v1.Container{{Name: "side", Image: images.TestappRef, RestartPolicy: &always,
		Args: []string{"--http", ":9080", "--tcp", ":9081", "--grpc", ":9082"}}}
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "setimage", v1.PodRunning)
	before := status(p, "app").ContainerID
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "setimage", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Containers[0].Image = images.TestappStopSignalRef
		cur.Spec.InitContainers[0].Image = images.TestappStopSignalRef
		_, err = cluster.Client().CoreV1().Pods(ns).Update(ctxT(t), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p = waitFor(t, ns, "setimage", time.Minute, "containers running the new image", func(p *v1.Pod) bool {
		for _, name := range []string{"app", "side"} {
			st := status(p, name)
			if st.Image != images.TestappStopSignalRef || st.State.Running == nil || st.RestartCount != 1 {
				return false
			}
		}
		return true
	})
	if p.Status.Phase != v1.PodRunning || status(p, "app").ContainerID == before {
		t.Errorf("after the image change: phase %s, container %s (before %s)", p.Status.Phase, status(p, "app").ContainerID, before)
	}
	evs, err := cluster.Client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	killing := false
	for _, e := range evs.Items {
		killing = killing || (e.Reason == "Killing" && e.Message == "Container app definition changed, will be restarted")
	}
	if !killing {
		t.Error("no Killing event saying the definition changed")
	}
}

func TestReadinessGateKept(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	gate := v1.PodConditionType("example.com/gate")
	pod := busybox(ns, "gated", "sleep", "3600")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "gated", v1.PodRunning)
	if podReady(p) {
		t.Fatal("ready without its readiness gate")
	}
	patch := func(status v1.ConditionStatus) {
		b, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": gate, "status": status, "lastTransitionTime": metav1.Now()}}}})
		if _, err := cluster.Client().CoreV1().Pods(ns).Patch(ctxT(t), "gated", types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	patch(v1.ConditionTrue)
	waitFor(t, ns, "gated", time.Minute, "ready with the gate", podReady)
	// A later write by hostlet (a container restart changes the status)
	// must keep the gate condition.
	if _, err := cluster.Kubectl(ctxT(t), "-n", ns, "exec", "gated", "--", "sh", "-c", "true"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	p, _ = cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "gated", metav1.GetOptions{})
	if !podReady(p) {
		t.Fatal("Ready lost")
	}
	patch(v1.ConditionFalse)
	waitFor(t, ns, "gated", time.Minute, "not ready without the gate", func(p *v1.Pod) bool { return !podReady(p) })
}

func TestActiveDeadline(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "deadline", "sleep", "3600")
	pod.Spec.ActiveDeadlineSeconds = ptrTo(int64(3))
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "deadline", v1.PodFailed)
	if p.Status.Reason != "DeadlineExceeded" {
		t.Fatalf("reason %q", p.Status.Reason)
	}
	expectEvent(t, ns, "deadline", "DeadlineExceeded: Pod was active on the node longer than the specified deadline")
}

func TestTerminationMessage(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "msgfile", "sh", "-c", "echo -n from-file > /dev/termination-log; exit 1")
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "msgfile", v1.PodFailed)
	if term := status(p, "c").State.Terminated; term == nil || term.Message != "from-file" || term.Reason != "Error" || term.ExitCode != 1 {
		t.Fatalf("terminated %+v", term)
	}
	pod = busybox(ns, "msglogs", "sh", "-c", "echo line1; echo from-logs; exit 2")
	pod.Spec.Containers[0].TerminationMessagePolicy = v1.TerminationMessageFallbackToLogsOnError
	cluster.CreatePod(t, pod)
	p = waitPhase(t, ns, "msglogs", v1.PodFailed)
	if term := status(p, "c").State.Terminated; term == nil || term.Message != "line1\nfrom-logs\n" {
		t.Fatalf("terminated %+v", term)
	}
}

// hostlet killed with -9 and restarted adopts its running pods: no
// container restarts, same statuses.
func TestRestartAdoptsPods(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	before := map[string]v1.ContainerStatus{}
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5"} {
		cluster.CreatePod(t, busybox(ns, n, "sleep", "3600"))
	}
	// A container that keeps writing: no line may be lost while hostlet is
	// down or after it attached again.
	counter := busybox(ns, "counter", "sh", "-c", "i=0; while true; do echo $i; i=$((i+1)); sleep 0.1; done")
	cluster.CreatePod(t, counter)
	waitPhase(t, ns, "counter", v1.PodRunning)
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5"} {
		p := waitPhase(t, ns, n, v1.PodRunning)
		before[n] = status(p, "c")
	}
	node.Kill()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	for n, was := range before {
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := status(p, "c")
		if now.ContainerID != was.ContainerID || now.RestartCount != was.RestartCount || now.State.Running == nil ||
			!now.State.Running.StartedAt.Equal(&was.State.Running.StartedAt) || p.Status.Phase != v1.PodRunning {
			t.Errorf("%s changed across the restart:\nbefore %+v\nafter  %+v", n, was, now)
		}
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", "counter")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(out)
	for i, l := range lines {
		if l != strconv.Itoa(i) {
			t.Fatalf("log line %d is %q: output lost across the restart", i, l)
		}
	}
	if len(lines) < 20 {
		t.Fatalf("only %d lines logged across the restart", len(lines))
	}
	// The adopted pods still react: deleting one works.
	grace := int64(1)
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "a1", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "a1")
}

// pollUntil is for state outside the API (containerd, the host).
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

func testapp(ns, name string, args ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptrTo(int64(5)),
			Containers: []v1.Container{{
				Name: "app", Image: images.TestappRef, Args: args,
				Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func httpProbe(path string, period, failure int32) *v1.Probe {
	return &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
		PeriodSeconds:    period,
		FailureThreshold: failure,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
	}
}

// waitFor waits for a pod condition with a watch.
func waitFor(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	p, err := cluster.WaitForPod(ctxT(t), ns, name, timeout, func(p *v1.Pod) (bool, error) { return cond(p), nil })
	if err != nil {
		t.Fatalf("pod %s/%s: %s: %v", ns, name, what, err)
	}
	return p
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func restarts(p *v1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// events lists the events of a pod, as `kubectl describe` shows them.
func events(t *testing.T, ns, name string) []string {
	t.Helper()
	list, err := cluster.Client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// expectEvent waits until the pod has an event whose "Reason: message"
// contains text.
func expectEvent(t *testing.T, ns, name, text string) {
	t.Helper()
	awaitEvent(t, ns, name, func(reason, msg string) bool { return strings.Contains(reason+": "+msg, text) })
}

// awaitEvent waits up to a minute for a pod event that match accepts.
func awaitEvent(t *testing.T, ns, name string, match func(reason, msg string) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctxT(t), 300*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if match(e.Reason, e.Message) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no matching event on %s/%s; events: %q", ns, name, events(t, ns, name))
	}
}

func get(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestLivenessHTTPFailureRestarts(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "live", "--http=:8080", "--healthy=false")
	pod.Spec.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 1)
	cluster.CreatePod(t, pod)
	waitFor(t, ns, "live", 2*time.Minute, "restarted by liveness", func(p *v1.Pod) bool { return restarts(p) >= 1 })
	expectEvent(t, ns, "live", "Unhealthy: Liveness probe failed: HTTP probe failed with statuscode: 500")
	expectEvent(t, ns, "live", "Killing: Container app failed liveness probe, will be restarted")
}

func TestReadinessFollowsApp(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "ready", "--http=:8080")
	pod.Spec.Containers[0].ReadinessProbe = httpProbe("/healthz", 1, 1)
	cluster.CreatePod(t, pod)
	p := waitFor(t, ns, "ready", time.Minute, "ready", podReady)
	base := "http://" + p.Status.PodIP + ":8080"
	get(t, base+"/healthz/fail")
	waitFor(t, ns, "ready", time.Minute, "not ready", func(p *v1.Pod) bool { return !podReady(p) })
	get(t, base+"/healthz/ok")
	p = waitFor(t, ns, "ready", time.Minute, "ready again", podReady)
	if restarts(p) != 0 {
		t.Fatalf("readiness restarted the container: %d", restarts(p))
	}
	expectEvent(t, ns, "ready", "Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 500")
}

func TestStartupProbeHoldsLiveness(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "startup", "--http=:8080", "--healthy-after=6s")
	c := &pod.Spec.Containers[0]
	c.StartupProbe = httpProbe("/healthz", 1, 30)
	c.LivenessProbe = httpProbe("/healthz", 1, 1)
	cluster.CreatePod(t, pod)
	running := waitFor(t, ns, "startup", time.Minute, "running", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if s := running.Status.ContainerStatuses[0].Started; s != nil && *s && time.Since(running.Status.ContainerStatuses[0].State.Running.StartedAt.Time) < 5*time.Second {
		t.Fatalf("started before the startup probe could succeed")
	}
	p := waitFor(t, ns, "startup", time.Minute, "started", func(p *v1.Pod) bool {
		s := p.Status.ContainerStatuses[0].Started
		return s != nil && *s && podReady(p)
	})
	if restarts(p) != 0 {
		t.Fatalf("liveness ran before startup succeeded: %d restarts; events %q", restarts(p), events(t, ns, "startup"))
	}
}

func TestTCPAndGRPCProbes(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "tcpgrpc", "--tcp=:8081", "--grpc=:8082")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8081)}}, PeriodSeconds: 1}
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 8082}}, PeriodSeconds: 1, FailureThreshold: 1}
	cluster.CreatePod(t, pod)
	waitFor(t, ns, "tcpgrpc", time.Minute, "ready", podReady)
	time.Sleep(3 * time.Second)
	p, _ := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "tcpgrpc", metav1.GetOptions{})
	if restarts(p) != 0 {
		t.Fatalf("grpc liveness failed: events %q", events(t, ns, "tcpgrpc"))
	}
	// A service the server does not know fails the probe.
	bad := testapp(ns, "grpcbad", "--grpc=:8082")
	svc := "nope"
	bad.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 8082, Service: &svc}}, PeriodSeconds: 1}
	cluster.CreatePod(t, bad)
	expectEvent(t, ns, "grpcbad", "Unhealthy: Readiness probe failed:")
}

func TestExecProbeTimeout(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "exectimeout", "sleep", "3600")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "10"}}},
		PeriodSeconds: 2, TimeoutSeconds: 1,
	}
	cluster.CreatePod(t, pod)
	expectEvent(t, ns, "exectimeout", `Unhealthy: Readiness probe failed: command "sleep 10" timed out`)
	p, _ := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "exectimeout", metav1.GetOptions{})
	if podReady(p) {
		t.Fatal("ready despite a timing-out probe")
	}
}

func TestReadinessSuccessThreshold(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	cluster.CreatePod(t, alwaysReadyPod(ns, "threshold", 1, 3))
	p := waitFor(t, ns, "threshold", time.Minute, "ready", podReady)
	// Three successes one second apart: ready no sooner than 2 s after start
	// (transition times have second precision).
	d := readyAfterStart(p)
	if d < time.Second {
		t.Fatalf("ready %v after start: successThreshold 3 not honoured", d)
	}
	t.Logf("ready %v after start with successThreshold 3, period 1s", d)
}

// As on the kubelet: a restart of hostlet leaves a Ready pod Ready and a
// started container started (its startup probe is not run again), so
// the restart takes no pod out of its Services.
func TestRestartKeepsReadiness(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := alwaysReadyPod(ns, "kept", 60, 1)
	pod.Spec.Containers[0].StartupProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1,
	}
	cluster.CreatePod(t, pod)
	p := waitFor(t, ns, pod.Name, time.Minute, "ready", podReady)
	w, err := cluster.Client().CoreV1().Pods(ns).Watch(ctxT(t), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitServing(t, ns, pod.Name)
	// The startup probe's period, thrice: long enough for a status
	// written after the adoption to show (a negative check: it can miss a
	// late flap, never fail a node that keeps the state).
	deadline := time.After(3 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*v1.Pod); ok {
				if c := p.Status.ContainerStatuses[0]; !podReady(p) || !c.Ready || c.Started == nil || !*c.Started {
					t.Fatalf("across the restart: pod Ready %v, container %+v", podReady(p), c)
				}
			}
		case <-deadline:
			return
		}
	}
}

// alwaysReadyPod is a sleeper whose exec readiness probe always succeeds.
func alwaysReadyPod(ns, name string, period, successThreshold int32) *v1.Pod {
	pod := busybox(ns, name, "sleep", "3600")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds:    period,
		SuccessThreshold: successThreshold,
	}
	return pod
}

// readyAfterStart is how long after its container's start a Ready pod
// of one container turned Ready.
func readyAfterStart(p *v1.Pod) time.Duration {
	started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.LastTransitionTime.Sub(started)
		}
	}
	return 0
}

// As on the kubelet, which probes readiness as soon as it sees the
// container running: a pod is Ready at its start, not a period later.
func TestReadinessProbedAtStart(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	cluster.CreatePod(t, alwaysReadyPod(ns, "atstart", 60, 1))
	p := waitFor(t, ns, "atstart", 45*time.Second, "ready before the probe's first period", podReady)
	t.Logf("ready %v after start with period 60s", readyAfterStart(p))
}

func TestPostStartHook(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "poststart", "sh", "-c", "while [ ! -f /tmp/hook ]; do sleep 0.1; done; cat /tmp/hook; sleep 3600")
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo hooked > /tmp/hook"}}}}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "poststart", v1.PodRunning)
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := cluster.Kubectl(ctx, "-n", ns, "logs", "poststart")
		return out == "hooked\n", nil
	})
	if err != nil {
		t.Fatal("the main process never saw the file written by postStart")
	}

	failing := busybox(ns, "poststartfail", "sleep", "3600")
	failing.Spec.RestartPolicy = v1.RestartPolicyAlways
	failing.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	failing.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "exit 1"}}}}
	cluster.CreatePod(t, failing)
	expectEvent(t, ns, "poststartfail", "FailedPostStartHook: PostStartHook failed")
	waitFor(t, ns, "poststartfail", 2*time.Minute, "restarted", func(p *v1.Pod) bool { return restarts(p) >= 1 })
}

// A preStop HTTP hook reaches the app before the stop signal does.
func TestPreStopHTTPBeforeSignal(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "prestop", "--http=:8080", "--signals")
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/echo?msg=prestop", Port: intstr.FromInt32(8080)}}}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "prestop", v1.PodRunning)
	logs := followLogs(t, ns, "prestop")
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "prestop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out := <-logs
	hook := strings.Index(out, "GET /echo")
	sig := strings.Index(out, "signal: SIGTERM")
	if hook < 0 || sig < 0 || hook > sig {
		t.Fatalf("want the preStop request before SIGTERM; log:\n%s", out)
	}
}

// followLogs streams a pod's log until its container exits. The response
// begins with the first log line (as with the kubelet), so the stream is
// opened in the background and given a moment to be established.
func followLogs(t *testing.T, ns, name string) <-chan string {
	out := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := cluster.Client().CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			out <- fmt.Sprintf("stream: %v", err)
			return
		}
		defer s.Close()
		b, _ := io.ReadAll(s)
		out <- string(b)
	}()
	time.Sleep(time.Second)
	return out
}

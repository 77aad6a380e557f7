package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPanicAnnotation is testpanic.Annotation (provider/testpanic): it works only on a
// hostlet started with the hidden --test-panic-hooks.
const testPanicAnnotation = "hostlet.test/panic"

// Panics injected into one pod (its worker's sync, a container start, an
// exec probe and a kubelet API log copier) each cost that pod a step, shown
// as a Warning event, and not the node: hostlet keeps running, the pod
// recovers, another pod's liveness probe keeps working and a new pod's
// failing liveness still restarts it.
func TestPanicCostsOnePodNotTheNode(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-panic"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{"--test-panic-hooks"}})
	ns := cluster.NewNamespace(t)

	steady := testapp(ns, "steady", "--http=:8080")
	steady.Spec.NodeName = name
	steady.Spec.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 1)
	cluster.CreatePod(t, steady)
	waitFor(t, ns, "steady", time.Minute, "ready", podReady)

	victim := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim",
			Annotations: map[string]string{testPanicAnnotation: "sync,start,exec,logs"}},
		Spec: v1.PodSpec{
			NodeName:                      name,
			TerminationGracePeriodSeconds: ptrTo(int64(1)),
			Containers: []v1.Container{{
				Name: "c", Image: images.BusyboxRef, Command: []string{"sh", "-c", "echo hello; exec sleep 3600"},
				LivenessProbe: &v1.Probe{
					ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
			}},
		},
	}
	cluster.CreatePod(t, victim)
	expectEvent(t, ns, "victim", `FailedSync: Error syncing pod, will retry: panic: test panic hook "sync"`)
	expectEvent(t, ns, "victim", `Failed: Error: panic: test panic hook "start"`)
	waitFor(t, ns, "victim", time.Minute, "running after the panics", podReady)
	expectEvent(t, ns, "victim", `Unhealthy: Liveness probe errored and resulted in unknown state: panic: test panic hook "exec"`)

	// The first log request's copier panics: the caller gets an error or
	// a cut stream, the pod an event, and the next request its logs.
	_, _ = cluster.Client().CoreV1().Pods(ns).GetLogs("victim", &v1.PodLogOptions{}).DoRaw(ctxT(t))
	expectEvent(t, ns, "victim", `Failed: Error: reading logs: panic: test panic hook "logs"`)
	out, err := cluster.Client().CoreV1().Pods(ns).GetLogs("victim", &v1.PodLogOptions{}).DoRaw(ctxT(t))
	if err != nil || !strings.Contains(string(out), "hello") {
		t.Fatalf("logs after the panic: %q, %v", out, err)
	}

	if h.Exited() {
		t.Fatal("hostlet exited after the panics")
	}
	// The victim's own probes kept running (an exec probe panic is not a
	// failure) and nothing restarted.
	time.Sleep(3 * time.Second)
	for _, pod := range []string{"victim", "steady"} {
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !podReady(p) || restarts(p) != 0 {
			t.Fatalf("%s after the panics: ready %v, restarts %d: %s", pod, podReady(p), restarts(p), harness.DescribePodStatus(p))
		}
	}
	// Supervision goes on: a new pod whose liveness fails is restarted.
	late := testapp(ns, "late", "--http=:8080", "--healthy=false")
	late.Spec.NodeName = name
	late.Spec.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 1)
	cluster.CreatePod(t, late)
	waitFor(t, ns, "late", 2*time.Minute, "restarted by liveness", func(p *v1.Pod) bool { return restarts(p) >= 1 })
	if h.Exited() {
		t.Fatal("hostlet exited")
	}
	b, _ := os.ReadFile(h.LogPath())
	if !strings.Contains(string(b), "recovered from panic") || !strings.Contains(string(b), "uid=") {
		t.Error("hostlet log has no recovered panic with the pod's uid")
	}
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A container that always fails its liveness probe (period 1 s, failure
// threshold 2) is restarted at least twice within 20 s of its first start,
// as by the kubelet: killed after two failed probes (~2-3 s) and, since the
// kubelet judges the back-off of a probe kill by the instance that exited
// before it, restarted at once twice, then after 10 s. The timeline of what
// the API saw is logged.
func TestLivenessRestartTiming(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
	}{
		{"http", func() *v1.Pod {
			p := testapp(ns, "live-http", "--http=:8080", "--healthy=false")
			p.Spec.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 2)
			return p
		}()},
		{"exec", func() *v1.Pod {
			p := busybox(ns, "live-exec", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done")
			p.Spec.RestartPolicy = v1.RestartPolicyAlways
			p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(5))
			p.Spec.Containers[0].LivenessProbe = &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}},
				PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 1, SuccessThreshold: 1,
			}
			return p
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			timeline, n := restartsWithin(t, tc.pod, 20*time.Second)
			t.Logf("timeline:\n%s", strings.Join(timeline, "\n"))
			if n < 2 {
				t.Errorf("%d restarts within 20 s of the first start, want >= 2 as the kubelet; events %q", n, events(t, ns, tc.pod.Name))
			}
		})
	}
}

// restartsWithin creates pod and follows it until window after the API
// first showed its container running; it returns what changed when (relative to that start)
// and the restart count reached within the window.
func restartsWithin(t *testing.T, pod *v1.Pod, window time.Duration) ([]string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Minute)
	defer cancel()
	pods := cluster.Client().CoreV1().Pods(pod.Namespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cluster.CreatePod(t, pod)
	var (
		timeline []string
		first    time.Time
		count    int32
		last     string
	)
	for {
		var deadline <-chan time.Time
		if !first.IsZero() {
			deadline = time.After(time.Until(first.Add(window)))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s never ran: %v", pod.Name, ctx.Err())
		case <-deadline:
			return timeline, count
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			p := ev.Object.(*v1.Pod)
			if len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			cs := p.Status.ContainerStatuses[0]
			if first.IsZero() && cs.State.Running != nil {
				first = time.Now() // when the API shows it running
			}
			if !first.IsZero() && time.Now().After(first.Add(window)) {
				return timeline, count
			}
			state := "waiting"
			switch {
			case cs.State.Running != nil:
				state = "running since " + cs.State.Running.StartedAt.Format("15:04:05")
			case cs.State.Terminated != nil:
				state = fmt.Sprintf("terminated %d at %s", cs.State.Terminated.ExitCode, cs.State.Terminated.FinishedAt.Format("15:04:05"))
			case cs.State.Waiting != nil:
				state = "waiting " + cs.State.Waiting.Reason
			}
			line := fmt.Sprintf("restarts=%d %s", cs.RestartCount, state)
			if line != last && !first.IsZero() {
				timeline = append(timeline, fmt.Sprintf("%6.1fs %s", time.Since(first).Seconds(), line))
				last = line
			}
			count = cs.RestartCount
		}
	}
}

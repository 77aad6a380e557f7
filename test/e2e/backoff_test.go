package e2e

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// No container restarts faster than the kubelet's back-off allows, whatever
// made it fail. Over a pod's first minute the kubelet starts a container
// whose process cannot run (StartError: a mistyped command), or that
// crashes, at 0 s, ~1 s, 11 s and 31 s (back-off 10 s, 20 s, 40 s ...): 3
// restarts, the next at 71 s; it retries a container it could not make (a
// missing ConfigMap) every 10-15 s. hostlet restarted the StartError one
// about 400 times a minute. Regular, init and sidecar containers, the
// waiting reason and the events as the kubelet's.
func TestFailedStartsBackOff(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	missing := []string{"/no/such/binary"}
	pods := map[string]*v1.Pod{}
	add := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyAlways; pods[p.Name] = p }
	add(busybox(ns, "start-error", missing...))
	add(busybox(ns, "crash", "sh", "-c", "exit 1"))
	p := busybox(ns, "init-start-error", "sleep", "3600")
	p.Spec.InitContainers = []v1.Container{{Name: "init", Image: p.Spec.Containers[0].Image, Command: missing}}
	add(p)
	p = busybox(ns, "sidecar-start-error", "sleep", "3600")
	p.Spec.InitContainers = []v1.Container{{Name: "side", Image: p.Spec.Containers[0].Image, Command: missing, RestartPolicy: &[]v1.ContainerRestartPolicy{v1.ContainerRestartPolicyAlways}[0]}}
	add(p)
	p = busybox(ns, "config-error", "sleep", "3600")
	p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "never"}, Key: "k"}}}}
	add(p)
	start := time.Now()
	for _, p := range pods {
		cluster.CreatePod(t, p)
	}
	time.Sleep(time.Until(start.Add(60 * time.Second)))
	get := func(name string) *v1.Pod {
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ pod, container string }{
		{"start-error", "c"}, {"crash", "c"}, {"init-start-error", "init"}, {"sidecar-start-error", "side"},
	} {
		st := status(get(tc.pod), tc.container)
		t.Logf("%s: %d restarts in 60 s, state %+v", tc.pod, st.RestartCount, st.State)
		// 3 with the kubelet; one more for the API's lag and the slowest
		// first start of the burst.
		if st.RestartCount > 4 || st.RestartCount < 2 {
			t.Errorf("%s/%s restarted %d times in its first minute, want 2-4 as the kubelet's 3", tc.pod, tc.container, st.RestartCount)
		}
		if tc.pod == "crash" {
			continue
		}
		if term := st.LastTerminationState.Terminated; term == nil || term.Reason != "StartError" || term.ExitCode != 128 {
			if term = st.State.Terminated; term == nil || term.Reason != "StartError" {
				t.Errorf("%s/%s: no StartError as its last state: %+v", tc.pod, tc.container, st)
			}
		}
		expectEvent(t, ns, tc.pod, "BackOff: Back-off restarting failed container "+tc.container+" in pod "+tc.pod+"_"+ns)
	}
	if w := waitWaiting(t, ns, "start-error", "CrashLoopBackOff"); w.Message == "" {
		t.Errorf("CrashLoopBackOff without the kubelet's message")
	}
	// The container never made: retried every 10 s (the kubelet: 10-15 s),
	// each retry a Failed event; the events aggregate into counts.
	list, err := cluster.Client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.name=config-error,reason=Failed"})
	if err != nil {
		t.Fatal(err)
	}
	var tries int32
	for _, e := range list.Items {
		tries += max(e.Count, 1)
	}
	t.Logf("config-error: %d tries in 60 s", tries)
	if tries > 8 || tries < 3 {
		t.Errorf("the container that could not be made was tried %d times in a minute, want 3-8 (every 10 s; the kubelet 10-15 s)", tries)
	}
	if st := status(get("config-error"), "c"); st.RestartCount != 0 || st.State.Waiting == nil || st.State.Waiting.Reason != "CreateContainerConfigError" {
		t.Errorf("config-error: %+v", st)
	}
}

package main

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hostlet/hostlet/test/images"
)

// scenarioLabel marks each pod with the measurement it belongs to, so one
// watch per measurement sees exactly its pods.
const scenarioLabel = "hostlet-bench"

// Every pod is pinned with nodeName and built here, so both nodes get the
// very same specs and images.
func basePod(node, ns, scenario string, i int, c v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d", scenario, i), Namespace: ns,
			Labels: map[string]string{scenarioLabel: scenario},
		},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{c}},
	}
}

// sleeperPod sleeps but ends at once on SIGTERM (PID 1 ignores signals it
// has no handler for; `wait` is interrupted by the trap), so the delete
// measurement times the node, not a 30 s grace period.
func sleeperPod(node, ns, scenario string, i int) *v1.Pod {
	return basePod(node, ns, scenario, i, v1.Container{
		Name: "main", Image: images.BusyboxRef,
		Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
	})
}

// exitMarker is the first argument of the exit pods' sleep; with the pod's
// index it makes each container process unique on the host, to find and
// kill it (sleepArg).
const exitMarker = 7360000

func sleepArg(i int) string { return fmt.Sprint(exitMarker + i) }

// exitPod runs a bare sleep as PID 1 that the benchmark kills from the host
// at a moment it records: the API's finishedAt has whole-second precision,
// too coarse for sub-second latencies.
func exitPod(node, ns string, i int) *v1.Pod {
	p := basePod(node, ns, "exit", i, v1.Container{
		Name: "main", Image: images.BusyboxRef, Command: []string{"sleep", sleepArg(i)},
	})
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	return p
}

// probedPod serves /healthz, probed for readiness every second.
func probedPod(node, ns string, i int) *v1.Pod {
	return basePod(node, ns, "probed", i, v1.Container{
		Name: "app", Image: images.TestappRef, Args: []string{"--http=:8080"},
		ReadinessProbe: &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1,
		},
	})
}

// containerTerminated is true once a container of the pod is reported
// terminated (harness.PodTerminated waits for the pod's phase instead).
func containerTerminated(p *v1.Pod) (bool, error) {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			return true, nil
		}
	}
	return false, nil
}

// describe is a one-line status for error messages.
func describe(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s phase=%s", p.Name, p.Status.Phase)
	for _, s := range p.Status.ContainerStatuses {
		switch {
		case s.State.Waiting != nil:
			fmt.Fprintf(&b, " %s waiting %s %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		case s.State.Terminated != nil:
			fmt.Fprintf(&b, " %s terminated %d %s", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason)
		case s.State.Running != nil:
			fmt.Fprintf(&b, " %s running ready=%v", s.Name, s.Ready)
		}
	}
	return b.String()
}

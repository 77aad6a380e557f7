package e2e

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// A pod whose container fails once and then succeeds (restartPolicy
// OnFailure) ends as with the kubelet: Succeeded, restartCount 1, the final
// state terminated with exit 0 and no lastState (the kubelet keeps only the
// newest dead instance), and PodReadyToStartContainers False (its sandbox is
// gone) in the very status that turns it Succeeded.
func TestTerminalStatusAfterRestart(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "once", "sh", "-c", "if [ -f /data/once ]; then exit 0; fi; touch /data/once; exit 1")
	pod.Spec.RestartPolicy = v1.RestartPolicyOnFailure
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("data", "/data")}
	cluster.CreatePod(t, pod)
	// The first status with the terminal phase must already be complete.
	p := waitFor(t, ns, "once", 2*time.Minute, "terminal", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if p.Status.Phase != v1.PodSucceeded {
		t.Fatalf("phase %s, want Succeeded", p.Status.Phase)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReadyToStartContainers && c.Status != v1.ConditionFalse {
			t.Errorf("PodReadyToStartContainers %s in the terminal status, want False", c.Status)
		}
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.RestartCount != 1 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
		t.Errorf("container status %+v, want terminated 0 after 1 restart", cs)
	}
	if cs.LastTerminationState.Terminated != nil {
		t.Errorf("lastState %+v, want none", cs.LastTerminationState.Terminated)
	}
}

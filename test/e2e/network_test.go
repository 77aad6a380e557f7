package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cniNotReady is the kubelet's Ready message (and, after "network is not
// ready: ", its pod event) while containerd has no CNI config.
const cniNotReady = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"

// A node whose CNI config dir is empty is NotReady with the kubelet's
// message; host-network pods run, others wait with NetworkNotReady; a
// config written later (as a CNI DaemonSet does) makes the node Ready and
// the pod Running with no restart, and deleting it makes the node NotReady.
func TestNetworkCNIFromCluster(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-cni"
	confDir := t.TempDir()
	extraNode(t, harness.HostletOptions{NodeName: name, NoWaitReady: true,
		ExtraArgs: []string{"--cni-conf-dir", confDir}})
	ctx := ctxT(t)
	if _, err := cluster.WaitForNode(ctx, name, 2*time.Minute, conditionIs(v1.NodeReady, v1.ConditionFalse, cniNotReady)); err != nil {
		t.Fatalf("Ready False with the kubelet's message: %v", err)
	}

	ns := cluster.NewNamespace(t)
	pinned := func(p *v1.Pod) *v1.Pod {
		p.Spec.NodeName = name
		p.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		return p
	}
	hostPod := pinned(busybox(ns, "hostnet", "sleep", "3600"))
	hostPod.Spec.HostNetwork = true
	podPod := pinned(busybox(ns, "podnet", "sleep", "3600"))
	for _, p := range []*v1.Pod{hostPod, podPod} {
		if _, err := cluster.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPhase(t, ns, hostPod.Name, v1.PodRunning)
	if msg := waitEvent(t, ns, podPod.Name, "NetworkNotReady"); msg != "network is not ready: "+cniNotReady {
		t.Errorf("NetworkNotReady event: %q", msg)
	}
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, podPod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodPending {
		t.Fatalf("pod network pod while the network is not ready: %v %v", p.Status.Phase, err)
	}

	// The CNI DaemonSet's part: the cluster's own conflist lands in the dir.
	conf, err := os.ReadFile(filepath.Join(cluster.CNIConfDir(), "10-hostlet.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(confDir, "10-daemonset.conflist")
	if err := os.WriteFile(confFile, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeReady, v1.ConditionTrue, "")); err != nil {
		t.Fatalf("Ready after the config was written: %v", err)
	}
	if p := waitPhase(t, ns, podPod.Name, v1.PodRunning); p.Status.PodIP == "" {
		t.Errorf("running without an IP: %+v", p.Status)
	}

	// Release the pod's address while the config is there, then take it away.
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctx, podPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, podPod.Name)
	if err := os.Remove(confFile); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, name, time.Minute, conditionIs(v1.NodeReady, v1.ConditionFalse, cniNotReady)); err != nil {
		t.Fatalf("NotReady after the config was deleted: %v", err)
	}
}

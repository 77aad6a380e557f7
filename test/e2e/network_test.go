package e2e

import (
	"encoding/json"
	stdnet "net"
	"os"
	"path/filepath"
	"strings"
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

// A pod is torn down with the CNI config it was set up with: after the
// config dir switched to another network, and after it was emptied, deleting
// a pod releases its address in its own network's host-local store.
func TestNetworkCNIConfigChangeReleasesIPs(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-cni-switch"
	confDir := t.TempDir()
	// Two networks on the cluster's bridge, each with its own store and a
	// slice of the subnet the other nodes' pods are unlikely to reach.
	conflist := func(net string, from, to byte, dataDir string) []byte {
		_, sub, err := stdnet.ParseCIDR(cluster.PodSubnet())
		if err != nil {
			t.Fatal(err)
		}
		ip := func(last byte) string { a := sub.IP.To4(); return stdnet.IPv4(a[0], a[1], a[2], last).String() }
		b, err := json.Marshal(map[string]any{
			"cniVersion": "1.0.0", "name": net,
			"plugins": []any{map[string]any{
				"type": "bridge", "bridge": cluster.BridgeName(), "isGateway": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": cluster.PodSubnet(), "rangeStart": ip(from), "rangeEnd": ip(to)}}},
					"dataDir": dataDir,
				},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	storeA, storeB := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "20-a.conflist"), conflist("net-a", 230, 239, storeA), 0o644); err != nil {
		t.Fatal(err)
	}
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{"--cni-conf-dir", confDir}})
	ns := cluster.NewNamespace(t)
	grace := int64(1)
	run := func(pod string) (string, string) {
		p := busybox(ns, pod, "sleep", "3600")
		p.Spec.NodeName = name
		cluster.CreatePod(t, p)
		ip := waitPhase(t, ns, pod, v1.PodRunning).Status.PodIP
		return ip, pod
	}
	held := func(store, net, ip string) bool {
		_, err := os.Stat(filepath.Join(store, net, ip))
		return err == nil
	}

	ipA, podA := run("on-a")
	if !held(storeA, "net-a", ipA) {
		t.Fatalf("%s not allocated in net-a's store %s", ipA, storeA)
	}
	// The DaemonSet's new config wins (lexically first).
	if err := os.WriteFile(filepath.Join(confDir, "10-b.conflist"), conflist("net-b", 240, 249, storeB), 0o644); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, time.Minute, "net-b to be loaded", func() bool {
		b, _ := os.ReadFile(h.LogPath())
		return strings.Contains(string(b), "network=net-b")
	})
	ipB, podB := run("on-b")
	if !held(storeB, "net-b", ipB) {
		t.Fatalf("%s not allocated in net-b's store", ipB)
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), podA, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, podA)
	if held(storeA, "net-a", ipA) {
		t.Errorf("%s of the deleted pod is still held in net-a's store", ipA)
	}

	// The config taken away altogether: the node is NotReady, yet deleting
	// the pod still releases its address.
	for _, f := range []string{"10-b.conflist", "20-a.conflist"} {
		if err := os.Remove(filepath.Join(confDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cluster.WaitForNode(ctxT(t), name, time.Minute, conditionIs(v1.NodeReady, v1.ConditionFalse, cniNotReady)); err != nil {
		t.Fatalf("NotReady after the config was deleted: %v", err)
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), podB, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, podB)
	if held(storeB, "net-b", ipB) {
		t.Errorf("%s of the deleted pod is still held in net-b's store", ipB)
	}
}

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// netnsCluster starts a cluster of the test's own whose node (hostlet and
// its containerd) lives in a network namespace with a real address
// (harness.Options.NodeNetns), imports the test images and starts the
// node with extra flags. Everything is stopped when the test ends.
func netnsCluster(t *testing.T, node string, hostletArgs ...string) *harness.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cache := os.Getenv("HOSTLET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "hostlet")
	}
	imgs, err := images.BuildAll(ctx, filepath.Join(cache, "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if err := c.ImportImage(ctx, img.Archive); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: node, ExtraArgs: hostletArgs}); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s at %s, API server at %s", node, c.NodeIP(), c.APIServerURL())
	return c
}

// waitPodIn waits for a pod of cluster c to reach phase.
func waitPodIn(t *testing.T, c *harness.Cluster, ns, name string, phase v1.PodPhase) *v1.Pod {
	t.Helper()
	p, err := c.WaitForPod(ctxT(t), ns, name, 2*time.Minute, harness.PodPhase(phase))
	if err != nil {
		t.Fatalf("pod %s/%s never reached %s: %v", ns, name, phase, err)
	}
	return p
}

// A node in its own network namespace has a real address: the API server's
// node proxy reaches its kubelet API (for a loopback node it answers
// "address not allowed"), and kubectl logs and exec go through it as ever.
func TestNodeProxyNodeAddress(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-netns"
	c := netnsCluster(t, name)
	ctx := ctxT(t)

	n, err := c.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal string
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != c.NodeIP() || internal == "127.0.0.1" {
		t.Errorf("InternalIP %q, want the node's veth address %s", internal, c.NodeIP())
	}
	body, err := c.Client().CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", name, "proxy", "healthz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("node proxy healthz: %q %v", body, err)
	}

	ns := c.NewNamespace(t)
	pod := busybox(ns, "talk", "sh", "-c", "echo hello from the node netns; sleep 3600")
	pod.Spec.NodeName = name
	c.CreatePod(t, pod)
	if p := waitPodIn(t, c, ns, pod.Name, v1.PodRunning); p.Status.PodIP == "" || p.Status.HostIP != c.NodeIP() {
		t.Errorf("pod IP %q host IP %q", p.Status.PodIP, p.Status.HostIP)
	}
	var logs string
	for i := 0; i < 50 && !strings.Contains(logs, "hello"); i++ {
		if logs, err = c.Kubectl(ctx, "logs", "-n", ns, pod.Name); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if logs != "hello from the node netns\n" {
		t.Errorf("kubectl logs: %q", logs)
	}
	out, err := c.Kubectl(ctx, "exec", "-n", ns, pod.Name, "--", "cat", "/proc/net/route")
	if err != nil || !strings.Contains(out, "eth0") {
		t.Errorf("kubectl exec: %q %v", out, err)
	}

	// A host-network pod shares the node's namespace: it sees the node's
	// address, not the root namespace's interfaces.
	hp := busybox(ns, "hostnet", "cat", "/proc/net/fib_trie")
	hp.Spec.NodeName = name
	hp.Spec.HostNetwork = true
	c.CreatePod(t, hp)
	waitPodIn(t, c, ns, hp.Name, v1.PodSucceeded)
	if out, err := c.Kubectl(ctx, "logs", "-n", ns, hp.Name); err != nil || !strings.Contains(out, c.NodeIP()) {
		t.Errorf("host-network pod's addresses: %q %v", out, err)
	}
}

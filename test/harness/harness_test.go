package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func startCluster(t *testing.T) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop) // Stop is idempotent; this covers failing tests
	return c
}

// assertNothingLeft checks that a stopped cluster left no process, mount,
// bridge, registry record or directory behind.
func assertNothingLeft(t *testing.T, dir, bridge string) {
	t.Helper()
	prefix := dir + "/"
	for _, p := range listProcs() {
		if p.zombie {
			continue
		}
		for _, a := range p.args {
			if strings.Contains(a, prefix) {
				t.Errorf("process %d survived Stop: %v", p.pid, p.args)
				break
			}
		}
	}
	if m, _ := mountsUnder(dir); len(m) > 0 { // tests only use temp dirs
		t.Errorf("mounts survived Stop: %v", m)
	}
	if _, err := net.InterfaceByName(bridge); err == nil {
		t.Errorf("bridge %s survived Stop", bridge)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir %s survived Stop (%v)", dir, err)
	}
	for _, in := range loadInstances() {
		if in.Dir == dir {
			t.Errorf("registry record %s survived Stop", in.ID)
		}
	}
}

func TestClusterStarts(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	c := startCluster(t)
	dir, bridge := c.Dir(), c.BridgeName()
	t.Logf("start took %v", c.StartDuration)

	if body, err := c.Client().Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil || string(body) != "ok" {
		t.Fatalf("/readyz: %q %v", body, err)
	}
	if _, err := c.Client().CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("default ServiceAccount: %v", err)
	}
	if _, err := c.Client().CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
		t.Errorf("kube-root-ca.crt: %v", err)
	}
	if svc, err := c.Client().CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Errorf("default/kubernetes Service: %v", err)
	} else if svc.Spec.ClusterIP != serviceIP {
		t.Errorf("kubernetes Service IP %s, want %s", svc.Spec.ClusterIP, serviceIP)
	}
	if out, err := c.Kubectl(ctx, "get", "namespaces", "-o", "name"); err != nil || !strings.Contains(out, "namespace/kube-system") {
		t.Errorf("kubectl get namespaces: %q %v", out, err)
	}
	out, err := exec.Command(filepath.Join(c.BinDir(), "ctr"), "-a", c.ContainerdSocket(), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Server:") {
		t.Errorf("ctr version: %v\n%s", err, out)
	}

	t.Run("NodeIdentity", func(t *testing.T) { testNodeIdentity(t, c) })
	t.Run("Namespace", func(t *testing.T) {
		ns := c.NewNamespace(t)
		if _, err := c.Client().CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("NewNamespace returned before SA existed: %v", err)
		}
	})

	c.Stop()
	assertNothingLeft(t, dir, bridge)
}

// testNodeIdentity checks that a NodeKubeconfig identity can register its
// own Node but, thanks to Node authorization and NodeRestriction, no other.
func testNodeIdentity(t *testing.T, c *Cluster) {
	ctx := context.Background()
	kc, err := c.NodeKubeconfig("id-node")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	nc := kubernetes.NewForConfigOrDie(cfg)
	if _, err := nc.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "id-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node creating itself: %v", err)
	}
	_, err = nc.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node creating another node: got %v, want Forbidden", err)
	}
	if _, err := nc.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node listing secrets: got %v, want Forbidden", err)
	}
	if _, _, err := c.KubeletServingCert("id-node"); err != nil {
		t.Error(err)
	}
	_ = c.Client().CoreV1().Nodes().Delete(ctx, "id-node", metav1.DeleteOptions{})
}

// TestHostletLifecycle drives StartHostlet, Restart and Kill with the real
// hostlet, and the apiserver→node TLS path (kubectl logs): the node's
// serving cert must verify against the CA and the apiserver's client cert
// must pass the node's --client-ca-file.
func TestHostletLifecycle(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	bin, err := BuildHostlet(ctx)
	if err != nil {
		t.Fatalf("building hostlet: %v", err)
	}
	c := startCluster(t)
	img := filepath.Join(t.TempDir(), "busybox.tar")
	if err := WriteBusyboxImage(img, testImage); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, img); err != nil {
		t.Fatal(err)
	}
	h, err := c.StartHostlet(ctx, HostletOptions{Binary: bin, NodeName: "harness-node"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartHostlet(ctx, HostletOptions{Binary: bin, NodeName: "harness-node"}); err == nil {
		t.Error("second StartHostlet with the same name succeeded")
	}
	ns := c.NewNamespace(t)
	pod := c.CreatePod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busybox", Namespace: ns},
		Spec: v1.PodSpec{NodeName: "harness-node", Containers: []v1.Container{{
			Name: "c", Image: testImage, Command: []string{"sh", "-c", "echo harness; sleep 3600"},
			ImagePullPolicy: v1.PullNever,
		}}},
	})
	if _, err := c.WaitForPod(ctx, ns, pod.Name, time.Minute, PodRunning); err != nil {
		t.Fatalf("%v\nhostlet log tail:\n%s", err, tail(h.LogPath(), 30))
	}
	// Running is reported when the process starts; its first line reaches
	// the log file through the shim's FIFO a moment later (as on a kubelet).
	var out string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err = c.Kubectl(ctx, "logs", "-n", ns, pod.Name)
		if (err == nil && out == "harness\n") || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || out != "harness\n" {
		t.Errorf("kubectl logs: %q %v", out, err)
	}
	pid := h.Pid()
	t0 := time.Now()
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", time.Since(t0))
	if h.Pid() == pid {
		t.Error("Restart kept the same pid")
	}
	h.Kill()
	if !h.Exited() {
		t.Error("Kill: process still running")
	}
	// The node keeps its last status: Ready, until node lifecycle notices.
	if err := c.WaitNodeReady(ctx, "harness-node"); err != nil {
		t.Error(err)
	}
}

// TestParallelClusters starts two clusters at once: ports, subnets,
// bridges, sockets and dirs must not collide.
func TestParallelClusters(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	var cs [2]*Cluster
	errs := make(chan error, 2)
	for i := range cs {
		go func() {
			c, err := Start(ctx, Options{Logf: t.Logf})
			cs[i] = c
			errs <- err
		}()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, c := range cs {
		if c != nil {
			t.Cleanup(c.Stop)
		}
	}
	if t.Failed() {
		return
	}
	a, b := cs[0], cs[1]
	if a.PodSubnet() == b.PodSubnet() || a.BridgeName() == b.BridgeName() ||
		a.APIServerURL() == b.APIServerURL() || a.ContainerdSocket() == b.ContainerdSocket() {
		t.Errorf("clusters collide: %s %s %s / %s %s %s", a.PodSubnet(), a.BridgeName(), a.APIServerURL(),
			b.PodSubnet(), b.BridgeName(), b.APIServerURL())
	}
	runPodLikeContainer(t, a, "par-"+filepath.Base(a.Dir()))
	runPodLikeContainer(t, b, "par-"+filepath.Base(b.Dir()))
	for _, c := range cs {
		if _, err := c.Kubectl(ctx, "get", "sa", "default"); err != nil {
			t.Error(err)
		}
	}
}

// TestRepeatedStartStop checks that Start/Stop cycles leave nothing behind.
func TestRepeatedStartStop(t *testing.T) {
	needRoot(t)
	n := 3
	if s := os.Getenv("HARNESS_REPEAT"); s != "" {
		fmt.Sscan(s, &n)
	}
	for i := 0; i < n; i++ {
		c := startCluster(t)
		dir, bridge := c.Dir(), c.BridgeName()
		runPodLikeContainer(t, c, fmt.Sprintf("rep-%d-%s", i, filepath.Base(dir)))
		c.Stop()
		assertNothingLeft(t, dir, bridge)
	}
}

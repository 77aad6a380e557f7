package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// netnsCluster starts a cluster of the test's own whose node (hostlet and
// its containerd) lives in a network namespace with a real address
// (harness.Options.NodeNetns), imports the test images and starts the
// node with extra flags. Everything is stopped when the test ends.
func netnsCluster(t *testing.T, node string, hostletArgs ...string) (*harness.Cluster, *harness.Hostlet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	importTestImages(t, c)
	h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: node, ExtraArgs: hostletArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s at %s, API server at %s", node, c.NodeIP(), c.APIServerURL())
	return c, h
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
	c, _ := netnsCluster(t, name)
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

// deployKubeProxy builds kube-proxy (build.sh kube-proxy) and its image,
// deploys testdata/kube-proxy.yaml on c's own-netns node and waits until its
// healthz on the node's address says the rules are synced.
func deployKubeProxy(t *testing.T, c *harness.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	deployComponent(ctx, t, c, "kube-proxy", images.BuildKubeProxy, "testdata/kube-proxy.yaml", map[string]string{
		"APISERVER": c.APIServerURL(), "CLUSTER_CIDR": c.PodSubnet(), "NODE_LABEL": harness.NodeNetnsLabel,
	})
	url := "http://" + net.JoinHostPort(c.NodeIP(), "10256") + "/healthz"
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body, err := httpGet(ctx, url)
		last = fmt.Sprintf("%d %s %v", code, body, err)
		return code == http.StatusOK, nil
	})
	if err != nil {
		pods, _ := c.Kubectl(ctx, "get", "pods", "-n", "kube-system", "-o", "wide")
		logs, _ := c.Kubectl(ctx, "logs", "-n", "kube-system", "ds/kube-proxy", "--tail", "40")
		t.Fatalf("kube-proxy healthz (%s): %v\n%s\n%s", last, err, pods, logs)
	}
}

// deployComponent deploys a test/cluster component on c
// (harness.Cluster.DeployComponent), its image imported into c's containerd.
func deployComponent(ctx context.Context, t *testing.T, c *harness.Cluster, name string,
	build func(ctx context.Context, outDir, bin string) (images.Image, error), manifest string, vars map[string]string) {
	t.Helper()
	a := harness.AddonImages{ImageDir: filepath.Join(imageCache(), "images"), Import: c.ImportImage}
	if err := c.DeployComponent(ctx, a, name, build, manifest, vars); err != nil {
		t.Fatal(err)
	}
}

// imageCache is $HOSTLET_CACHE or ~/.cache/hostlet, as build.sh has it.
func imageCache() string {
	if cache := os.Getenv("HOSTLET_CACHE"); cache != "" {
		return cache
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "hostlet")
}

func httpGet(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	cl := &http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// webService starts n testapp pods (answering their name on GET /) on
// node behind Service "web" of type typ, port 80, and returns the Service.
func webService(t *testing.T, c *harness.Cluster, ns, node string, n int, svc *v1.Service) *v1.Service {
	t.Helper()
	for i := 0; i < n; i++ {
		p := testapp(ns, fmt.Sprintf("web-%d", i))
		p.Labels = map[string]string{"app": "web"}
		p.Spec.NodeName = node
		c.CreatePod(t, p)
	}
	svc.Namespace = ns
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	created, err := c.Client().CoreV1().Services(ns).Create(ctxT(t), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := c.WaitForPod(ctxT(t), ns, fmt.Sprintf("web-%d", i), 2*time.Minute, harness.PodReady); err != nil {
			t.Fatal(err)
		}
	}
	return created
}

// clientPod starts a busybox pod on node to make requests from.
func clientPod(t *testing.T, c *harness.Cluster, ns, node string) string {
	t.Helper()
	p := busybox(ns, "client", "sleep", "3600")
	p.Spec.NodeName = node
	p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	c.CreatePod(t, p)
	waitPodIn(t, c, ns, p.Name, v1.PodRunning)
	return p.Name
}

// fetchFrom asks host:port for "/" over HTTP/1.0 from pod (with nc:
// the static busybox's wget crashes on name service lookups in an image
// without NSS) until it answers (kube-proxy programs a new Service within a
// second or so) and returns the body.
func fetchFrom(t *testing.T, c *harness.Cluster, ns, pod, host, port string) string {
	t.Helper()
	ctx := ctxT(t)
	var out string
	var err error
	for i := 0; i < 60; i++ {
		out, err = c.Kubectl(ctx, "exec", "-n", ns, pod, "--", "sh", "-c",
			`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "$0" "$1"`, host, port)
		if _, body, ok := strings.Cut(out, "\r\n\r\n"); err == nil && strings.HasPrefix(out, "HTTP/1.0 200") && ok {
			return body
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("GET http://%s:%s/ from %s: %q %v", host, port, pod, out, err)
	return ""
}

// kube-proxy runs as a DaemonSet pod on a hostlet node (in its own network
// namespace); a pod on that node reaches a ClusterIP Service backed by
// pods on it, both backends answer, and its NodePort answers on the node's
// address. kube-proxy keeps running, not restarted, across a restart of
// hostlet.
func TestServiceClusterIPAndNodePort(t *testing.T) {
	skipIfNoCluster(t)
	const node = "hostlet-svc"
	c, h := netnsCluster(t, node)
	deployKubeProxy(t, c)
	ns := c.NewNamespace(t)
	svc := webService(t, c, ns, node, 2, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeNodePort},
	})
	client := clientPod(t, c, ns, node)

	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		seen[fetchFrom(t, c, ns, client, svc.Spec.ClusterIP, "80")] = true
	}
	if !seen["web-0"] || !seen["web-1"] || len(seen) != 2 {
		t.Errorf("ClusterIP %s answered %v, want web-0 and web-1", svc.Spec.ClusterIP, seen)
	}

	nodePort := fmt.Sprint(svc.Spec.Ports[0].NodePort)
	nodeURL := "http://" + net.JoinHostPort(c.NodeIP(), nodePort) + "/"
	var code int
	var body string
	var getErr error
	err := wait.PollUntilContextTimeout(ctxT(t), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body, getErr = httpGet(ctx, nodeURL)
		return getErr == nil && code == http.StatusOK, nil
	})
	if err != nil || (body != "web-0" && body != "web-1") {
		t.Fatalf("NodePort %s: %d %q %v (%v)", nodeURL, code, body, getErr, err)
	}
	// From a pod too, as cluster clients use NodePorts.
	if got := fetchFrom(t, c, ns, client, c.NodeIP(), nodePort); got != "web-0" && got != "web-1" {
		t.Errorf("NodePort from a pod: %q", got)
	}

	proxyPod := func() *v1.Pod {
		pods, err := c.Client().CoreV1().Pods("kube-system").List(ctxT(t), metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("kube-proxy pods: %v %v", pods, err)
		}
		return &pods.Items[0]
	}
	before := proxyPod()
	if err := h.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := fetchFrom(t, c, ns, client, svc.Spec.ClusterIP, "80"); got != "web-0" && got != "web-1" {
		t.Errorf("ClusterIP after a restart of hostlet: %q", got)
	}
	after := proxyPod()
	if after.UID != before.UID || len(after.Status.ContainerStatuses) != 1 || after.Status.ContainerStatuses[0].RestartCount != 0 ||
		after.Status.ContainerStatuses[0].State.Running == nil ||
		!after.Status.ContainerStatuses[0].State.Running.StartedAt.Equal(&before.Status.ContainerStatuses[0].State.Running.StartedAt) {
		t.Errorf("kube-proxy after a restart of hostlet: %s", harness.DescribePodStatus(after))
	}
}

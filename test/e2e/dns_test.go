package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// clusterDNS is the kube-dns Service's address (in the harness's
// 10.96.0.0/16 service range), given to hostlet with --cluster-dns.
const clusterDNS = "10.96.0.10"

// deployCoreDNS builds CoreDNS (build.sh coredns) and its image, deploys
// testdata/coredns.yaml and waits until its pod is Ready.
func deployCoreDNS(t *testing.T, c *harness.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	deployComponent(ctx, t, c, "coredns", images.BuildCoreDNS, "testdata/coredns.yaml", map[string]string{
		"DOMAIN": "cluster.local", "DNS_IP": clusterDNS,
	})
	if _, err := c.Kubectl(ctx, "rollout", "status", "-n", "kube-system", "deployment/coredns", "--timeout=3m"); err != nil {
		pods, _ := c.Kubectl(ctx, "get", "pods", "-n", "kube-system", "-o", "wide")
		logs, _ := c.Kubectl(ctx, "logs", "-n", "kube-system", "deployment/coredns", "--tail", "40")
		t.Fatalf("coredns: %v\n%s\n%s", err, pods, logs)
	}
}

// lookup runs nslookup name in pod until it answers with want (the records
// appear once CoreDNS has seen the Service and its endpoints) and returns
// the output.
func lookup(t *testing.T, c *harness.Cluster, ns, pod, name string, want ...string) string {
	t.Helper()
	ctx := ctxT(t)
	var out string
	var err error
	for i := 0; i < 60; i++ {
		// busybox's nslookup tries every search domain and exits 1 when any
		// of them is NXDOMAIN, even though one answered: judge the output.
		out, err = c.Kubectl(ctx, "exec", "-n", ns, pod, "--", "nslookup", name)
		if containsAll(out, want) {
			return out
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("nslookup %s in %s: want %v, got %q %v", name, pod, want, out, err)
	return ""
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// CoreDNS runs as a Deployment on a hostlet node with kube-proxy, behind the
// kube-dns Service at hostlet's --cluster-dns: a pod on hostlet resolves a
// Service by its full name and by its short name through the search path
// hostlet writes into resolv.conf, reaches it by name, and resolves a
// headless Service to its pods and a pod's hostname.subdomain record.
func TestDNSServiceNames(t *testing.T) {
	skipIfNoCluster(t)
	const node = "hostlet-dns"
	c, _ := netnsCluster(t, node, "--cluster-dns", clusterDNS, "--cluster-domain", "cluster.local")
	deployKubeProxy(t, c)
	deployCoreDNS(t, c)
	ns := c.NewNamespace(t)
	ctx := ctxT(t)

	svc := webService(t, c, ns, node, 2, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}})
	headless, err := c.Client().CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-headless", Namespace: ns},
		Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone, Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Name: "http", Port: 8080}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod with hostname and subdomain naming the headless Service gets
	// its own record, <hostname>.<subdomain>.<ns>.svc.<domain>.
	named := testapp(ns, "named")
	named.Labels = map[string]string{"app": "web"}
	named.Spec.NodeName = node
	named.Spec.Hostname, named.Spec.Subdomain = "box", headless.Name
	c.CreatePod(t, named)
	namedPod, err := c.WaitForPod(ctx, ns, named.Name, 2*time.Minute, harness.PodReady)
	if err != nil {
		t.Fatal(err)
	}
	client := clientPod(t, c, ns, node)

	resolv, err := c.Kubectl(ctx, "exec", "-n", ns, client, "--", "cat", "/etc/resolv.conf")
	if err != nil || !strings.Contains(resolv, "nameserver "+clusterDNS) || !strings.Contains(resolv, "search "+ns+".svc.cluster.local svc.cluster.local cluster.local") {
		t.Fatalf("resolv.conf: %q %v", resolv, err)
	}
	full := "web." + ns + ".svc.cluster.local"
	lookup(t, c, ns, client, full, svc.Spec.ClusterIP)
	lookup(t, c, ns, client, "web", "Name:\t"+full+"\nAddress: "+svc.Spec.ClusterIP)

	var podIPs []string
	for _, name := range []string{"web-0", "web-1", "named"} {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		podIPs = append(podIPs, p.Status.PodIP)
	}
	lookup(t, c, ns, client, "web-headless."+ns+".svc.cluster.local", podIPs...)
	lookup(t, c, ns, client, "box.web-headless."+ns+".svc.cluster.local", namedPod.Status.PodIP)

	// And the name leads to the Service through kube-proxy. busybox's nc
	// arms its -w alarm before the name lookup, which goes through the
	// C library (A and AAAA at once, 5 s before a retry), so "nc: timed
	// out" is a lookup or a connect slower than 2 s: a first failure is
	// told apart (the same request to the ClusterIP) and logged with what
	// routes the traffic, and the request is retried, as fetchFrom does.
	get := func(host string) (string, error) {
		return c.Kubectl(ctx, "exec", "-n", ns, client, "--", "sh", "-c",
			`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "$0" 80`, host)
	}
	start := time.Now()
	out, err := get("web")
	if err != nil || !strings.Contains(out, "HTTP/1.0 200") {
		took := time.Since(start)
		byIP, ipErr := get(svc.Spec.ClusterIP)
		t.Logf("first GET http://web/ failed after %v: %q %v; GET http://%s/ at once: %q %v",
			took.Round(time.Millisecond), out, err, svc.Spec.ClusterIP, firstLine(byIP), ipErr)
		logServiceState(t, c, ns)
		fetchFrom(t, c, ns, client, "web", "80")
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// logServiceState logs what decides where a Service's traffic goes: the
// pods, the EndpointSlices the controller made of them, and the rules
// kube-proxy wrote in the node's namespace.
func logServiceState(t *testing.T, c *harness.Cluster, ns string) {
	t.Helper()
	ctx := context.Background()
	pods, _ := c.Kubectl(ctx, "get", "pods", "-n", ns, "-o", "wide")
	slices, _ := c.Kubectl(ctx, "get", "endpointslices", "-n", ns, "-o", "yaml")
	svcs, _ := c.Kubectl(ctx, "get", "services", "-n", ns, "-o", "wide")
	rules, err := exec.CommandContext(ctx, "nsenter", "--net="+c.NodeNetnsPath(), "iptables-save").CombinedOutput()
	t.Logf("pods:\n%s\nservices:\n%s\nendpointslices:\n%s\niptables in the node's namespace (%v):\n%s", pods, svcs, slices, err, rules)
}

package e2e

import (
	"context"
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

	// And the name leads to the Service through kube-proxy.
	out, err := c.Kubectl(ctx, "exec", "-n", ns, client, "--", "sh", "-c",
		`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 web 80`)
	if err != nil || !strings.Contains(out, "HTTP/1.0 200") {
		t.Errorf("GET http://web/: %q %v", out, err)
	}
}

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/hostlet/hostlet/test/harness"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A pod's hostPort answers on the node's address (through the portmap
// plugin of the node's conflist): from outside the node, from the node
// itself and from another pod; also after a restart of hostlet. Deleting
// the pod (after that restart: DEL with the mappings the sandbox recorded)
// closes the port and leaves no iptables rule naming the pod's IP. The
// node has its own network namespace, so the rules stay in it.
func TestHostPort(t *testing.T) {
	skipIfNoCluster(t)
	const node = "hostlet-hostport"
	const hostPort = 31808
	c, h := netnsCluster(t, node)
	ns := c.NewNamespace(t)
	p := testapp(ns, "web")
	p.Spec.NodeName = node
	p.Spec.Containers[0].Ports[0].HostPort = hostPort
	c.CreatePod(t, p)
	pod, err := c.WaitForPod(ctxT(t), ns, p.Name, 2*time.Minute, harness.PodReady)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(c.NodeIP(), fmt.Sprint(hostPort))

	// From outside the node (the root namespace, over the node's veth) and
	// from inside it (OUTPUT's rules, not PREROUTING's).
	outside := func() (string, error) { return getOver(ctxT(t), addr, "") }
	inside := func() (string, error) { return getOver(ctxT(t), addr, c.NodeNetnsPath()) }
	for what, get := range map[string]func() (string, error){"outside": outside, "inside": inside} {
		if body := answers(t, get); body != "web" {
			t.Errorf("%s the node, %s answered %q, want the pod's name", what, addr, body)
		}
	}
	client := clientPod(t, c, ns, node)
	if got := fetchFrom(t, c, ns, client, c.NodeIP(), fmt.Sprint(hostPort)); got != "web" {
		t.Errorf("from a pod, %s answered %q", addr, got)
	}
	if rules := rulesFor(t, c, pod.Status.PodIP); len(rules) == 0 {
		t.Fatalf("no iptables rule names the pod's IP %s while it runs", pod.Status.PodIP)
	}

	if err := h.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if body := answers(t, outside); body != "web" {
		t.Errorf("after a restart of hostlet, %s answered %q", addr, body)
	}

	grace := int64(1)
	if err := c.Client().CoreV1().Pods(ns).Delete(ctxT(t), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	var rules []string
	err = wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		rules = rulesFor(t, c, pod.Status.PodIP)
		return len(rules) == 0, nil
	})
	if err != nil {
		t.Fatalf("iptables rules naming %s left after the pod was deleted:\n%s", pod.Status.PodIP, strings.Join(rules, "\n"))
	}
	for what, get := range map[string]func() (string, error){"outside": outside, "inside": inside} {
		if body, err := get(); err == nil {
			t.Errorf("%s the node, %s still answers after the pod was deleted: %q", what, addr, body)
		}
	}
}

// answers polls get until it succeeds (the pod's server may come up just
// after Ready is written) and returns the body.
func answers(t *testing.T, get func() (string, error)) string {
	t.Helper()
	var body string
	var getErr error
	err := wait.PollUntilContextTimeout(ctxT(t), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		body, getErr = get()
		return getErr == nil, nil
	})
	if err != nil {
		t.Fatalf("no answer: %v (%v)", getErr, err)
	}
	return body
}

// getOver asks addr for "/" over HTTP/1.0 and returns the body; with
// netnsPath, from that network namespace (the socket is made there; the
// dial and the I/O then need no namespace).
func getOver(ctx context.Context, addr, netnsPath string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var conn net.Conn
	dial := func(ns.NetNS) error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	}
	var err error
	if netnsPath == "" {
		err = dial(nil)
	} else {
		err = ns.WithNetNSPath(netnsPath, dial)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	head, body, ok := strings.Cut(string(b), "\r\n\r\n")
	if !ok || !strings.HasPrefix(head, "HTTP/1.0 200") {
		return "", fmt.Errorf("answer %q", b)
	}
	return body, nil
}

// rulesFor lists the iptables rules of the node's network namespace that
// name ip.
func rulesFor(t *testing.T, c *harness.Cluster, ip string) []string {
	t.Helper()
	out, err := exec.CommandContext(ctxT(t), "nsenter", "--net="+c.NodeNetnsPath(), "iptables-save").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save in the node's namespace: %v\n%s", err, out)
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, ip+"/") || strings.Contains(l, ip+":") || strings.HasSuffix(l, " "+ip) {
			rules = append(rules, l)
		}
	}
	return rules
}

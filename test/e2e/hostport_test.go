package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A pod's hostPort answers on the node's address (through the portmap
// plugin of the node's conflist): from outside the node, from the node
// itself and from another pod; also after a restart of hostlet. Deleting
// the pod (after that restart: DEL with the mappings the sandbox recorded)
// closes the port and leaves no iptables rule naming the pod's IP. The
// node has its own network namespace, so the rules stay in it. A second
// node in that namespace, on hostlet's default bridge network, serves a
// hostPort the same way.
func TestHostPort(t *testing.T) {
	skipIfNoCluster(t)
	const node = "hostlet-hostport"
	c, h := netnsCluster(t, node)
	ns := c.NewNamespace(t)

	t.Run("conflist", func(t *testing.T) {
		const hostPort = 31808
		pod, addr := hostPortPod(t, c, ns, node, "web", hostPort)
		client := clientPod(t, c, ns, node)
		if got := fetchFrom(t, c, ns, client, c.NodeIP(), fmt.Sprint(hostPort)); got != "web" {
			t.Errorf("from a pod, %s answered %q", addr, got)
		}
		if err := h.Restart(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if body := answers(t, func() (string, error) { return getOver(ctxT(t), addr, "") }); body != "web" {
			t.Errorf("after a restart of hostlet, %s answered %q", addr, body)
		}
		deleteHostPortPod(t, c, pod, addr)
	})

	t.Run("default bridge", func(t *testing.T) {
		// An empty config dir and the node's pod CIDR, set as the
		// controller-manager would: the default network, with portmap.
		const node2, hostPort, podCIDR = "hostlet-hostport-bridge", 31809, "10.245.7.0/24"
		h2, err := c.StartHostlet(ctxT(t), harness.HostletOptions{Binary: hostletBinary(t), NodeName: node2, NoWaitReady: true,
			ExtraArgs: []string{"--cni-conf-dir", t.TempDir(), "--cni-default-bridge", "p" + c.BridgeName()[2:]}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h2.Stop)
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR, podCIDR)
		err = wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Client().CoreV1().Nodes().Patch(ctx, node2, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
			return err == nil, nil // the node registers first
		})
		if err != nil {
			t.Fatalf("setting the pod CIDR of %s: %v", node2, err)
		}
		if err := c.WaitNodeReady(ctxT(t), node2); err != nil {
			t.Fatal(err)
		}
		pod, addr := hostPortPod(t, c, ns, node2, "web2", hostPort)
		if _, n, _ := net.ParseCIDR(podCIDR); !n.Contains(net.ParseIP(pod.Status.PodIP)) {
			t.Errorf("pod IP %s not from the node's pod CIDR %s", pod.Status.PodIP, podCIDR)
		}
		// A pod without hostPorts (its network set up with no plugin
		// process) reaches the other over the bridge, also after a restart;
		// deleting each releases its address in host-local's store.
		plain := busybox(ns, "plain", "sleep", "3600")
		plain.Spec.NodeName = node2
		plain.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		c.CreatePod(t, plain)
		plainIP := waitPodIn(t, c, ns, plain.Name, v1.PodRunning).Status.PodIP
		store := filepath.Join(c.CNICacheDir(), "networks", "hostlet-pod-network")
		for _, ip := range []string{pod.Status.PodIP, plainIP} {
			if _, err := os.Stat(filepath.Join(store, ip)); err != nil {
				t.Errorf("address %s not in host-local's store: %v", ip, err)
			}
		}
		if got := fetchFrom(t, c, ns, plain.Name, pod.Status.PodIP, "8080"); got != "web2" {
			t.Errorf("from a pod, %s:8080 answered %q", pod.Status.PodIP, got)
		}
		if err := h2.Restart(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if body := answers(t, func() (string, error) { return getOver(ctxT(t), addr, "") }); body != "web2" {
			t.Errorf("after a restart of hostlet, %s answered %q", addr, body)
		}
		deleteHostPortPod(t, c, pod, addr)
		if err := c.Client().CoreV1().Pods(ns).Delete(ctxT(t), plain.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Client().CoreV1().Pods(ns).Get(ctx, plain.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("pod %s not gone: %v", plain.Name, err)
		}
		for _, ip := range []string{pod.Status.PodIP, plainIP} {
			if _, err := os.Stat(filepath.Join(store, ip)); !os.IsNotExist(err) {
				t.Errorf("address %s still reserved after its pod was deleted: %v", ip, err)
			}
		}
	})
}

// hostPortPod runs a testapp pod on node with hostPort for its port 8080,
// checks that the node's address answers on it from outside the node (the
// root namespace, over the node's veth) and from inside it (OUTPUT's
// rules, not PREROUTING's), and that iptables rules name its IP.
func hostPortPod(t *testing.T, c *harness.Cluster, ns, node, name string, hostPort int32) (*v1.Pod, string) {
	t.Helper()
	p := testapp(ns, name)
	p.Spec.NodeName = node
	p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	p.Spec.Containers[0].Ports[0].HostPort = hostPort
	c.CreatePod(t, p)
	pod, err := c.WaitForPod(ctxT(t), ns, p.Name, 2*time.Minute, harness.PodReady)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(c.NodeIP(), fmt.Sprint(hostPort))
	for _, netns := range []string{"", c.NodeNetnsPath()} {
		if body := answers(t, func() (string, error) { return getOver(ctxT(t), addr, netns) }); body != name {
			t.Errorf("from netns %q, %s answered %q, want the pod's name", netns, addr, body)
		}
	}
	if rules := rulesFor(t, c, pod.Status.PodIP); len(rules) == 0 {
		t.Fatalf("no iptables rule names the pod's IP %s while it runs", pod.Status.PodIP)
	}
	return pod, addr
}

// deleteHostPortPod deletes the pod and checks that its rules go and its
// host port no longer answers, from outside the node or inside it.
func deleteHostPortPod(t *testing.T, c *harness.Cluster, pod *v1.Pod, addr string) {
	t.Helper()
	if err := c.Client().CoreV1().Pods(pod.Namespace).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var rules []string
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		rules = rulesFor(t, c, pod.Status.PodIP)
		return len(rules) == 0, nil
	})
	if err != nil {
		t.Fatalf("iptables rules naming %s left after the pod was deleted:\n%s", pod.Status.PodIP, strings.Join(rules, "\n"))
	}
	for _, netns := range []string{"", c.NodeNetnsPath()} {
		if body, err := getOver(ctxT(t), addr, netns); err == nil {
			t.Errorf("from netns %q, %s still answers after the pod was deleted: %q", netns, addr, body)
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

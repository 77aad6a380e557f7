package e2e

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
)

func internalIP(n *v1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func hasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// A user's edit of the node status (Ready set to Unknown as the node
// lifecycle controller does, the InternalIP changed) is put right within
// 15 s, as the kubelet's status check against the Node in the API does.
// Runs on a node of its own so the shared node is not disturbed.
func TestNodeStatusEditReverted(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-reconcile"
	extraNode(t, harness.HostletOptions{NodeName: name})
	ctx := ctxT(t)
	nodes := cluster.Client().CoreV1().Nodes()
	// The node writes its status too: a conflict means "read it again".
	var want string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want = internalIP(n)
		ready := nodeCondition(n, v1.NodeReady)
		if ready == nil || ready.Status != v1.ConditionTrue || want == "" {
			t.Fatalf("node not ready or without InternalIP: %+v", n.Status)
		}
		ready.Status, ready.Reason, ready.Message = v1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
		ready.LastTransitionTime = metav1.Now()
		for i := range n.Status.Addresses {
			if n.Status.Addresses[i].Type == v1.NodeInternalIP {
				n.Status.Addresses[i].Address = "10.255.255.1"
			}
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var last *v1.Node
	for time.Since(t0) < 15*time.Second {
		if last, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if c := nodeCondition(last, v1.NodeReady); c != nil && c.Status == v1.ConditionTrue && c.Reason == "KubeletReady" && internalIP(last) == want {
			t.Logf("status put right after %v", time.Since(t0).Round(time.Millisecond))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("after 15 s: Ready %+v, InternalIP %q (want %q)", nodeCondition(last, v1.NodeReady), internalIP(last), want)
}

// With the API server frozen past the node monitor grace period, the node
// lifecycle controller marks the node Unknown and taints it unreachable as
// soon as the API server is back; hostlet, whose Lease renewals resume on
// their own, must also put its Ready status back: within 15 s of the resume
// the node is Ready with no unreachable taint. A cluster of its own, with a
// 20 s grace period (default 50 s) so the outage can be 35 s.
func TestNodeReadyAfterAPIServerFreeze(t *testing.T) {
	skipIfNoCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{
		Logf:                  t.Logf,
		KeepDir:               os.Getenv("E2E_KEEP") != "",
		ControllerManagerArgs: []string{"--node-monitor-grace-period=20s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	const name = "hostlet-freeze"
	h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: name})
	if err != nil {
		t.Fatalf("starting hostlet: %v", err)
	}
	defer h.Stop()
	client := c.Client()
	nodes := client.CoreV1().Nodes()
	pid := c.Pid("kube-apiserver")
	if pid == 0 {
		t.Fatal("no kube-apiserver process")
	}
	// Whether the controller marks the outage is a race the node does not
	// decide: the controller writes Unknown only while the Lease it last saw
	// is older than the grace period, so if its write made during the freeze
	// is lost (a request failed or timed out in the controller-manager) and
	// the node's Lease renewal lands before its next pass, it sees a healthy
	// node. That happened once in CI, and in all three outages of one
	// make test under load. An outage the controller did not mark is run
	// again; the last one holds hostlet stopped too, from the freeze until
	// the controller has marked the node, so that its writes cannot race
	// the controller's. The node's part is judged on an outage that was
	// exercised.
	defer syscall.Kill(pid, syscall.SIGCONT) // never leave it stopped
	const attempts = 3
	for attempt := 1; ; attempt++ {
		n := readyUntainted(ctx, t, nodes, name)
		held := 0
		if attempt == attempts {
			held = h.Pid()
			if err := syscall.Kill(held, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(held, syscall.SIGCONT)
			t.Logf("hostlet (pid %d) stopped", held)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver (pid %d) frozen", pid)
		time.Sleep(35 * time.Second)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		t.Log("kube-apiserver resumed")
		if held != 0 {
			pollUntil(t, 30*time.Second, "the node marked Unknown", func() bool {
				m, err := nodes.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false
				}
				r := nodeCondition(m, v1.NodeReady)
				return r != nil && r.Status == v1.ConditionUnknown
			})
			if err := syscall.Kill(held, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			t.Log("hostlet resumed")
		}
		t0 := time.Now()

		deadline := t0.Add(15 * time.Second)
		seenUnknown, seenTaint := watchNodeRecovery(ctx, t, client, name, n.ResourceVersion, deadline)
		if !seenUnknown && !seenTaint {
			if attempt < attempts {
				t.Logf("outage %d: the node lifecycle controller never marked the node Unknown; again", attempt)
				continue
			}
			t.Errorf("the node lifecycle controller never marked the node Unknown in %d outages: the outage was not exercised", attempts)
		}
		// The state that counts is the one at the deadline: a taint the
		// controller adds late must be gone again by then.
		time.Sleep(time.Until(deadline))
		n, err = nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := nodeCondition(n, v1.NodeReady); r == nil || r.Status != v1.ConditionTrue || hasTaint(n, v1.TaintNodeUnreachable) {
			t.Fatalf("15 s after the resume: Ready %+v, taints %+v; hostlet log %s", r, n.Spec.Taints, h.LogPath())
		}
		return
	}
}

// readyUntainted waits for the node to be Ready without the controller's
// not-ready and unreachable taints, and returns it.
func readyUntainted(ctx context.Context, t *testing.T, nodes corev1client.NodeInterface, name string) *v1.Node {
	t.Helper()
	var n *v1.Node
	var err error
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		if n, err = nodes.Get(ctx, name, metav1.GetOptions{}); err == nil {
			if r := nodeCondition(n, v1.NodeReady); r != nil && r.Status == v1.ConditionTrue &&
				!hasTaint(n, v1.TaintNodeNotReady) && !hasTaint(n, v1.TaintNodeUnreachable) {
				return n
			}
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("node never ready and untainted: %v %+v", err, n)
		}
	}
}

// watchNodeRecovery follows the Node from rv (before the outage) until it
// is Ready without the unreachable taint after having been marked, or until
// deadline; it reports whether Unknown and the taint were seen.
func watchNodeRecovery(ctx context.Context, t *testing.T, client kubernetes.Interface, name, rv string, deadline time.Time) (seenUnknown, seenTaint bool) {
	t.Helper()
	t0 := time.Now()
	for time.Now().Before(deadline) {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		w, err := client.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
		if err != nil {
			cancel()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			n := ev.Object.(*v1.Node)
			rv = n.ResourceVersion
			r := nodeCondition(n, v1.NodeReady)
			if r != nil && r.Status == v1.ConditionUnknown && !seenUnknown {
				seenUnknown = true
				t.Logf("+%v Ready Unknown (%s)", time.Since(t0).Round(time.Millisecond), r.Reason)
			}
			if hasTaint(n, v1.TaintNodeUnreachable) && !seenTaint {
				seenTaint = true
				t.Logf("+%v tainted %s", time.Since(t0).Round(time.Millisecond), v1.TaintNodeUnreachable)
			}
			if (seenUnknown || seenTaint) && r != nil && r.Status == v1.ConditionTrue && !hasTaint(n, v1.TaintNodeUnreachable) {
				t.Logf("+%v Ready again, untainted", time.Since(t0).Round(time.Millisecond))
				w.Stop()
				cancel()
				return
			}
		}
		cancel()
	}
	return
}

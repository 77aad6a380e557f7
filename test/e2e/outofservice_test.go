package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// outOfService is the taint an admin puts on a node that shut down without
// warning (non-graceful node shutdown).
var outOfService = v1.Taint{Key: v1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}

// Non-graceful node shutdown: the node's hostlet dies with its pod running;
// once the node is NotReady an admin taints it out-of-service, the taint
// eviction controller deletes the pod and the controller-manager's pod GC
// force-deletes it (the node will never confirm). A controller recreates the
// pod under its name (a new UID) on the same node. When hostlet comes back it
// removes everything of the old pod (containers, sandbox, pod dir) without
// ever starting it again, and runs the new one.
func TestOutOfServiceNodeLeavesNothingBehind(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-oos"
	h := extraNode(t, harness.HostletOptions{NodeName: name})
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	pod := func() *v1.Pod {
		p := busybox(ns, "web-0", "sleep", "3600")
		p.Spec.NodeName = name
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		return p
	}
	if _, err := c.Pods(ns).Create(ctxT(t), pod(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := waitPhase(t, ns, "web-0", v1.PodRunning)
	oldID := strings.TrimPrefix(status(old, "c").ContainerID, "containerd://")
	oldDir := filepath.Join(h.RootDir(), "pods", string(old.UID))
	if _, err := os.Stat(oldDir); err != nil {
		t.Fatal(err)
	}

	// The node goes down hard: its containers keep running in containerd.
	h.Kill()
	if _, err := cluster.WaitForNode(ctxT(t), name, 3*time.Minute, func(n *v1.Node) (bool, error) {
		r := nodeCondition(n, v1.NodeReady)
		return r != nil && r.Status != v1.ConditionTrue, nil
	}); err != nil {
		t.Fatalf("the node lifecycle controller never marked the node NotReady: %v", err)
	}
	setOutOfService(t, name, true)
	// Taint eviction deletes the pod, pod GC force-deletes it (every 20 s).
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
		return err != nil && p.UID == "", nil
	}); err != nil {
		t.Fatal("pod GC never force-deleted the pod of the out-of-service node")
	}
	// The admin's last step once the node is repaired; the controller's
	// replacement lands on the same node.
	setOutOfService(t, name, false)
	if _, err := c.Pods(ns).Create(ctxT(t), pod(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	logStart := fileSize(t, h.LogPath())
	if err := h.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	repl := waitPhase(t, ns, "web-0", v1.PodRunning)
	if repl.UID == old.UID {
		t.Fatalf("the old pod is back: %s", repl.UID)
	}
	if id := strings.TrimPrefix(status(repl, "c").ContainerID, "containerd://"); id == oldID || status(repl, "c").RestartCount != 0 {
		t.Fatalf("the replacement runs in the old pod's container: %+v", status(repl, "c"))
	}
	ctrd := cluster.ContainerdClient()
	pollUntil(t, time.Minute, "the old pod's containers and pod directory to be removed", func() bool {
		cs, err := ctrd.Containers(ctxT(t), fmt.Sprintf("labels.%q==%s", "io.kubernetes.pod.uid", old.UID))
		_, dirErr := os.Stat(oldDir)
		return err == nil && len(cs) == 0 && os.IsNotExist(dirErr)
	})
	if _, err := os.Stat(filepath.Join(h.RootDir(), "pods", string(repl.UID))); err != nil {
		t.Errorf("the replacement's pod dir: %v", err)
	}

	// Never started again: the old UID appears in the restarted hostlet's
	// log only as the leftovers it removed.
	since := logSince(t, h.LogPath(), logStart)
	var swept bool
	for _, l := range strings.Split(since, "\n") {
		if !strings.Contains(l, string(old.UID)) {
			continue
		}
		for _, started := range []string{"pod admitted", "pod sandbox ready", "container started"} {
			if strings.Contains(l, started) {
				t.Errorf("the force-deleted pod was started again: %s", l)
			}
		}
		swept = swept || strings.Contains(l, "removing leftovers of a pod that no longer exists")
	}
	if !swept {
		t.Errorf("no sweep of the old pod (uid %s) in %s", old.UID, h.LogPath())
	}
}

// setOutOfService adds or removes the out-of-service taint.
func setOutOfService(t *testing.T, name string, on bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var taints []v1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != outOfService.Key {
				taints = append(taints, tn)
			}
		}
		if on {
			taints = append(taints, outOfService)
		}
		n.Spec.Taints = taints
		_, err = cluster.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("tainting node %s out-of-service=%v: %v", name, on, err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// logSince is what a log file gained after offset.
func logSince(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[offset:])
}

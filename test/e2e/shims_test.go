package e2e

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The containers of a burst share containerd shims, at most 8 to a shim,
// each with its own process, output and exit; once they are deleted their
// shims exit, and nothing is left to the next burst.
func TestShimsSharedAndGone(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	// The node keeps a shim open for new containers per CPU (at least 2)
	// and gives them in turn: 12 pods on 2 CPUs, 6 to each.
	open := max(goruntime.NumCPU(), 2)
	pods := 4*open + 4
	var wg sync.WaitGroup
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each prints its own name, then sleeps until deleted.
			cluster.CreatePod(t, busybox(ns, fmt.Sprintf("s-%d", i), "sh", "-c", fmt.Sprintf("echo hello-%d; trap 'exit 0' TERM; sleep 3600 & wait", i)))
		}()
	}
	wg.Wait()
	shims := map[int][]string{} // shim pid -> the containers it serves
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("s-%d", i)
		p := waitPhase(t, ns, name, v1.PodRunning)
		shim, err := parentOf(int(taskOf(t, &p.Status.ContainerStatuses[0]).Pid()))
		if err != nil {
			t.Fatal(err)
		}
		shims[shim] = append(shims[shim], name)
		waitLogLine(t, ns, name, fmt.Sprintf("hello-%d", i))
	}
	// Each open group may already hold containers of earlier tests: each
	// is filled, then followed by one more (4 to 6 pods each, 8 to a shim).
	if len(shims) > 2*open || len(shims) < (pods+7)/8 {
		t.Errorf("%d pods' containers served by %d shims %v, want %d to %d (8 to a shim, %d open)", pods, len(shims), shims, (pods+7)/8, 2*open, open)
	}
	shared := false
	for pid, served := range shims {
		if len(served) > 8 {
			t.Errorf("shim %d serves %d of the pods' containers, want at most 8: %v", pid, len(served), served)
		}
		shared = shared || len(served) > 1
	}
	if !shared {
		t.Errorf("no shim serves two of the pods' containers: %v", shims)
	}
	// Each container exits on its own: one deleted, the others still run.
	deletePod(t, ns, "s-0")
	waitGone(t, ns, "s-0")
	for i := 1; i < pods; i++ {
		if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), fmt.Sprintf("s-%d", i), metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodRunning {
			t.Fatalf("pod s-%d not Running after s-0 was deleted: %v", i, err)
		}
	}
	for i := 1; i < pods; i++ {
		deletePod(t, ns, fmt.Sprintf("s-%d", i))
	}
	for i := 1; i < pods; i++ {
		waitGone(t, ns, fmt.Sprintf("s-%d", i))
	}
	// A shim may also serve a container of an earlier test that is still
	// running: that one stays, the others exit.
	pollUntil(t, time.Minute, "the pods' shims to exit", func() bool {
		serving := shimsServing(t)
		for pid := range shims {
			if syscall.Kill(pid, 0) == nil && !zombie(pid) && !serving[pid] {
				return false
			}
		}
		return true
	})
}

// shimsServing is the set of shims that have a running container.
func shimsServing(t *testing.T) map[int]bool {
	ctx := ctxT(t)
	ctrs, err := cluster.ContainerdClient().Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]bool{}
	for _, c := range ctrs {
		task, err := c.Task(ctx, nil)
		if err != nil {
			continue
		}
		if ppid, err := parentOf(int(task.Pid())); err == nil {
			m[ppid] = true
		}
	}
	return m
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// parentOf is pid's parent: for a container's first process, its shim.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis: state, ppid.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return strconv.Atoi(f[1])
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0] == "Z"
}

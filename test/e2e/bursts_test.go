package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// envInt reads a size of the burst tests, so a longer run is one variable
// away: HOSTLET_BURST_PODS=100 HOSTLET_BURST_ROUNDS=10.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// quickStop is a busybox pod that runs until deleted and stops at once on
// SIGTERM.
func quickStop(ns, name string) *v1.Pod {
	pod := busybox(ns, name, "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
	pod.Spec.NodeName = nodeName
	return pod
}

// each runs fn for every index, at most par at a time, and returns the
// first error.
func each(n, par int, fn func(i int) error) error {
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// waitAll polls the namespace's pods until done says every one of want is
// where it should be; on timeout it reports the pods that are not.
func waitAll(t *testing.T, ctx context.Context, ns string, want int, timeout time.Duration, what string, done func(*v1.Pod) bool) []v1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		list, err := cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			var behind []string
			for i := range list.Items {
				if !done(&list.Items[i]) {
					behind = append(behind, list.Items[i].Name+": "+harness.DescribePodStatus(&list.Items[i]))
				}
			}
			if len(list.Items) == want && len(behind) == 0 {
				return list.Items
			}
			if time.Now().After(deadline) {
				if len(behind) > 10 {
					behind = behind[:10]
				}
				t.Fatalf("%s: %d pods, want %d; not there yet:\n%s", what, len(list.Items), want, strings.Join(behind, "\n"))
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func podDir(uid types.UID) string {
	return filepath.Join(cluster.Dir(), "hostlet", nodeName, "pods", string(uid))
}

// assertNothingLeft waits until containerd holds no container of the pod
// and its pod directory is gone.
func assertNothingLeft(t *testing.T, uid types.UID) {
	t.Helper()
	pollUntil(t, 30*time.Second, "containers and pod dir of "+string(uid)+" removed", func() bool {
		ctrs, err := cluster.ContainerdClient().Containers(ctxT(t), fmt.Sprintf("labels.%q==%s", "io.kubernetes.pod.uid", uid))
		if err != nil || len(ctrs) > 0 {
			return false
		}
		_, err = os.Stat(podDir(uid))
		return os.IsNotExist(err)
	})
}

func deleteAndWaitGone(t *testing.T, ctx context.Context, ns string, names []string, timeout time.Duration) {
	t.Helper()
	if err := each(len(names), 20, func(i int) error {
		err := cluster.Client().CoreV1().Pods(ns).Delete(ctx, names[i], metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, ns, 0, timeout, "every pod deleted", func(*v1.Pod) bool { return false })
}

// Rounds of concurrent pods with names reused from the round before, each
// round deleted before the next: every pod of every round runs and every
// deletion completes (a reused name is a new pod, never mistaken for the
// old one still being torn down).
func TestBurstReusedNames(t *testing.T) {
	skipIfNoCluster(t)
	n, rounds := envInt("HOSTLET_BURST_PODS", 40), envInt("HOSTLET_BURST_ROUNDS", 3)
	ns := cluster.NewNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*5*time.Minute)
	defer cancel()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%03d", i)
	}
	for r := 1; r <= rounds; r++ {
		t0 := time.Now()
		if err := each(n, 20, func(i int) error {
			_, err := cluster.Client().CoreV1().Pods(ns).Create(ctx, quickStop(ns, names[i]), metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatalf("round %d: creating: %v", r, err)
		}
		waitAll(t, ctx, ns, n, 3*time.Minute, fmt.Sprintf("round %d: every pod Running", r), func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil
		})
		running := time.Since(t0)
		t1 := time.Now()
		deleteAndWaitGone(t, ctx, ns, names, 3*time.Minute)
		t.Logf("round %d: %d pods Running in %v, deleted in %v", r, n, running.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
}

// The StatefulSet pattern: a pod recreated under its name while the old one
// is still being torn down runs at once, and the old one finishes on its
// own. Both ways a name frees up are tried: a graceful delete (the name is
// free once hostlet removed the object, its host teardown still running)
// and a force delete (the old containers still stopping).
func TestRecreateWhileTerminating(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	ctx := ctxT(t)
	pods := cluster.Client().CoreV1().Pods(ns)
	// A container that ignores SIGTERM: the old pod takes its grace period
	// (2 s) to stop.
	web := func() *v1.Pod {
		pod := busybox(ns, "web-0", "sleep", "3600")
		pod.Spec.NodeName = nodeName
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(2))
		return pod
	}
	for _, force := range []bool{false, true} {
		for i := 0; i < 3; i++ {
			old, err := pods.Create(ctx, web(), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitPhase(t, ns, "web-0", v1.PodRunning)
			opts := metav1.DeleteOptions{}
			if force {
				opts.GracePeriodSeconds = ptrTo(int64(0))
			}
			if err := pods.Delete(ctx, "web-0", opts); err != nil {
				t.Fatal(err)
			}
			// Recreate the moment the name is free.
			var fresh *v1.Pod
			pollUntil(t, time.Minute, "name web-0 free again", func() bool {
				fresh, err = pods.Create(ctx, web(), metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
				return err == nil
			})
			ctrs, _ := cluster.ContainerdClient().Containers(ctx, fmt.Sprintf("labels.%q==%s", "io.kubernetes.pod.uid", old.UID))
			p := waitPhase(t, ns, "web-0", v1.PodRunning)
			if p.UID != fresh.UID {
				t.Fatalf("running pod is %s, want the new %s", p.UID, fresh.UID)
			}
			t.Logf("force=%v #%d: new pod created with %d old containers left, Running", force, i, len(ctrs))
			assertNothingLeft(t, old.UID)
			if err := pods.Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
				t.Fatal(err)
			}
			waitGone(t, ns, "web-0")
			assertNothingLeft(t, fresh.UID)
		}
	}
}

// hangingRegistry accepts connections and never answers: a pull from it
// hangs until cancelled.
func hangingRegistry(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	if err := cluster.AllowInsecureRegistry(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return len(conns) }
}

// A pod deleted while its image is being pulled (before any status was
// published) and one deleted while its postStart hook hangs: the deletion
// reaches each, interrupts it, and nothing is left behind.
func TestDeleteDuringPullAndPostStart(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	ctx := ctxT(t)
	pods := cluster.Client().CoreV1().Pods(ns)
	addr, accepted := hangingRegistry(t)

	pull := busybox(ns, "pulling", "true")
	pull.Spec.NodeName = nodeName
	pull.Spec.Containers[0].Image = addr + "/hang/busybox:1"
	pull.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
	hook := busybox(ns, "hooked", "sleep", "3600")
	hook.Spec.NodeName = nodeName
	hook.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{
		Exec: &v1.ExecAction{Command: []string{"sleep", "3600"}}}}
	pulling := cluster.CreatePod(t, pull)
	hooked := cluster.CreatePod(t, hook)

	pollUntil(t, time.Minute, "the pull reached the registry", func() bool { return accepted() > 0 })
	pollUntil(t, time.Minute, "the hooked container runs", func() bool {
		ctrs, err := cluster.ContainerdClient().Containers(ctx, fmt.Sprintf("labels.%q==%s", "io.kubernetes.pod.uid", hooked.UID))
		return err == nil && len(ctrs) > 0
	})
	time.Sleep(time.Second)
	for _, name := range []string{"pulling", "hooked"} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(2))}); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, ns, "pulling")
	waitGone(t, ns, "hooked")
	assertNothingLeft(t, pulling.UID)
	assertNothingLeft(t, hooked.UID)
}

// More pods at once than --max-pods: exactly max-pods are admitted, the
// rest fail OutOfpods, however fast they arrive.
func TestMaxPodsBurst(t *testing.T) {
	skipIfNoCluster(t)
	const maxPods, burst = 5, 12
	const name = "hostlet-maxpods"
	extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{"--max-pods", strconv.Itoa(maxPods)}})
	ns := cluster.NewNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := make([]string, burst)
	if err := each(burst, burst, func(i int) error {
		names[i] = fmt.Sprintf("p-%02d", i)
		pod := quickStop(ns, names[i])
		pod.Spec.NodeName = name
		_, err := cluster.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	list := waitAll(t, ctx, ns, burst, 3*time.Minute, "every pod Running or Failed", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning || p.Status.Phase == v1.PodFailed
	})
	var admitted, rejected int
	for _, p := range list {
		switch {
		case p.Status.Phase == v1.PodRunning:
			admitted++
		case p.Status.Reason == "OutOfpods":
			rejected++
		default:
			t.Errorf("%s: %s", p.Name, harness.DescribePodStatus(&p))
		}
	}
	if admitted != maxPods || rejected != burst-maxPods {
		t.Errorf("admitted %d, rejected %d; want %d and %d", admitted, rejected, maxPods, burst-maxPods)
	}
	deleteAndWaitGone(t, ctx, ns, names, 2*time.Minute)
}

// Pods whose first container exits at once while the second is still
// starting: the sandbox stays until the pod is terminal, so every pod ends
// Failed with the first container Completed and the second exited 5, none in
// StartError.
func TestExitRaceBurst(t *testing.T) {
	skipIfNoCluster(t)
	n := envInt("HOSTLET_EXIT_RACE_PODS", 25)
	ns := cluster.NewNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := make([]string, n)
	t0 := time.Now()
	if err := each(n, 25, func(i int) error {
		names[i] = fmt.Sprintf("race-%02d", i)
		pod := busybox(ns, names[i], "true")
		pod.Spec.NodeName = nodeName
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: "second", Image: images.BusyboxRef, Command: []string{"sh", "-c", "sleep 2; exit 5"}})
		_, err := cluster.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	list := waitAll(t, ctx, ns, n, 3*time.Minute, "every pod terminal", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded
	})
	t.Logf("%d pods terminal %v after the first was created", n, time.Since(t0).Round(time.Millisecond))
	for _, p := range list {
		first, second := status(&p, "c"), status(&p, "second")
		ok := p.Status.Phase == v1.PodFailed &&
			first.State.Terminated != nil && first.State.Terminated.ExitCode == 0 && first.State.Terminated.Reason == "Completed" &&
			second.State.Terminated != nil && second.State.Terminated.ExitCode == 5 && second.State.Terminated.Reason == "Error"
		if !ok {
			t.Errorf("%s: %s", p.Name, harness.DescribePodStatus(&p))
		}
	}
	deleteAndWaitGone(t, ctx, ns, names, 2*time.Minute)
}

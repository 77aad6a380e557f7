package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// deleteAndWatch deletes a pod and returns the phases it showed until it
// was gone, and how long that took.
func deleteAndWatch(t *testing.T, ns, name string, opts metav1.DeleteOptions) ([]v1.PodPhase, time.Duration) {
	t.Helper()
	w, err := cluster.Client().CoreV1().Pods(ns).Watch(ctxT(t), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), name, opts); err != nil {
		t.Fatal(err)
	}
	var phases []v1.PodPhase
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			p, _ := ev.Object.(*v1.Pod)
			if p != nil && (len(phases) == 0 || phases[len(phases)-1] != p.Status.Phase) {
				phases = append(phases, p.Status.Phase)
			}
			if ev.Type == watch.Deleted {
				return phases, time.Since(start)
			}
		case <-timeout:
			t.Fatalf("pod %s not deleted; phases %v", name, phases)
		}
	}
}

func TestGracefulDeletionReachesTerminalPhase(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "graceful", "--http=:8080", "--signals")
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "graceful", v1.PodRunning)
	logs := followLogs(t, ns, "graceful")
	phases, took := deleteAndWatch(t, ns, "graceful", metav1.DeleteOptions{})
	if !strings.Contains(<-logs, "signal: SIGTERM") {
		t.Error("the app did not record SIGTERM")
	}
	if phases[len(phases)-1] != v1.PodSucceeded {
		t.Fatalf("phases before removal %v, want Succeeded last", phases)
	}
	t.Logf("deleted in %v, phases %v", took, phases)
}

func TestGracePeriodKill(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "stubborn", "--ignore-term", "--signals", "--log=trapped")
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(4))
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "stubborn", v1.PodRunning)
	// Running is the process started, not its SIGTERM handler in place.
	waitLogLine(t, ns, "stubborn", "trapped")
	phases, took := deleteAndWatch(t, ns, "stubborn", metav1.DeleteOptions{})
	if took < 3500*time.Millisecond || took > 7*time.Second {
		t.Fatalf("a container ignoring SIGTERM was gone after %v, want the 4s grace period", took)
	}
	if phases[len(phases)-1] != v1.PodFailed {
		t.Fatalf("phases %v, want Failed (SIGKILL) last", phases)
	}
}

func TestStopSignals(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "stopsignal", "--signals")
	pod.Spec.Containers[0].Image = images.TestappStopSignalRef
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "stopsignal", v1.PodRunning)
	logs := followLogs(t, ns, "stopsignal")
	deleteAndWatch(t, ns, "stopsignal", metav1.DeleteOptions{})
	if out := <-logs; !strings.Contains(out, "signal: SIGUSR1") || strings.Contains(out, "SIGTERM") {
		t.Fatalf("want the image's STOPSIGNAL SIGUSR1 only; log:\n%s", out)
	}
}

func TestPreStopOverrunGetsTwoSeconds(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := testapp(ns, "overrun", "--signals", "--term-delay=1s")
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(2))
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "5"}}}}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "overrun", v1.PodRunning)
	logs := followLogs(t, ns, "overrun")
	phases, took := deleteAndWatch(t, ns, "overrun", metav1.DeleteOptions{})
	out := <-logs
	// The hook used the 2 s grace period; the container still gets the
	// signal and 2 s more, enough for its 1 s shutdown.
	if !strings.Contains(out, "signal: SIGTERM") || phases[len(phases)-1] != v1.PodSucceeded {
		t.Fatalf("took %v, phases %v, log:\n%s", took, phases, out)
	}
	if took < 2500*time.Millisecond {
		t.Fatalf("signal sent before the preStop hook's grace ran out (%v)", took)
	}
}

func TestSidecarsStopAfterMainInReverseOrder(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	always := v1.ContainerRestartPolicyAlways
	hostDir := t.TempDir()
	mount := []v1.VolumeMount{{Name: "out", MountPath: "/out"}}
	// Each records when its SIGTERM arrived (uptime, 10 ms resolution),
	// then takes a while to exit.
	trap := func(name string, delay string) []string {
		return []string{"sh", "-c", "trap 'cut -d\" \" -f1 /proc/uptime > /out/" + name + "; sleep " + delay + "; exit 0' TERM; touch /out/" + name + ".trapped; while true; do sleep 0.1; done"}
	}
	pod := busybox(ns, "order", trap("main", "1")...)
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Volumes = []v1.Volume{{Name: "out", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}}}}
	pod.Spec.Containers[0].VolumeMounts = mount
	img := pod.Spec.Containers[0].Image
	pod.Spec.InitContainers = []v1.Container{
		{Name: "side1", Image: img, RestartPolicy: &always, Command: trap("side1", "0"), VolumeMounts: mount},
		{Name: "side2", Image: img, RestartPolicy: &always, Command: trap("side2", "0.5"), VolumeMounts: mount},
	}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "order", v1.PodRunning)
	// Running says the containers started, not that their shells have set
	// their traps: a SIGTERM before that is ignored (a PID 1 without a
	// handler), and the container is killed at the end of the grace period.
	pollUntil(t, time.Minute, "every container to set its trap", func() bool {
		for _, n := range []string{"main", "side1", "side2"} {
			if _, err := os.Stat(filepath.Join(hostDir, n+".trapped")); err != nil {
				return false
			}
		}
		return true
	})
	deleteAndWatch(t, ns, "order", metav1.DeleteOptions{})
	stamp := func(n string) float64 {
		b, err := os.ReadFile(filepath.Join(hostDir, n))
		if err != nil {
			t.Fatalf("%s did not record its stop: %v", n, err)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	m, s2, s1 := stamp("main"), stamp("side2"), stamp("side1")
	// main takes 1 s to exit after its signal, side2 0.5 s: each signal
	// comes after the previous container exited.
	if s2-m < 0.9 || s1-s2 < 0.4 {
		t.Fatalf("signals at main=%.2f side2=%.2f side1=%.2f; want main, then side2 after main exited, then side1", m, s2, s1)
	}
}

func TestForceDeletionCleansUp(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "forced", "sleep", "3600")
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "forced", v1.PodRunning)
	id := strings.TrimPrefix(status(p, "c").ContainerID, "containerd://")
	zero := int64(0)
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "forced", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "the container to be removed", func() bool {
		_, err := cluster.ContainerdClient().LoadContainer(ctxT(t), id)
		return err != nil
	})
}

// After many create/delete cycles of a pod with an emptyDir, a secret and a
// CNI IP, nothing of them is left on the host.
func TestNoLeftoversAfterCycles(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	if _, err := cluster.Client().CoreV1().Secrets(ns).Create(ctxT(t), &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const cycles, parallel = 100, 5
	type made struct{ uid, container string }
	results := make(chan made, cycles)
	errs := make(chan error, cycles)
	sem := make(chan struct{}, parallel)
	for i := 0; i < cycles; i++ {
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem }()
			uid, id, err := cycle(ns, fmt.Sprintf("cycle-%03d", i))
			errs <- err
			results <- made{uid, id}
		}(i)
	}
	var all []made
	for i := 0; i < cycles; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		all = append(all, <-results)
	}
	root := node.RootDir()
	ipamDir := filepath.Join(cluster.Dir(), "cni", "ipam")
	pollUntil(t, time.Minute, "every trace of the pods to be gone", func() bool {
		var left []string
		ctx := ctxT(t)
		for _, m := range all {
			if _, err := os.Stat(filepath.Join(root, "pods", m.uid)); err == nil {
				left = append(left, "pod dir "+m.uid)
			}
			if _, err := cluster.ContainerdClient().LoadContainer(ctx, m.container); err == nil {
				left = append(left, "container "+m.container)
			}
			if _, err := cluster.ContainerdClient().SnapshotService("").Stat(ctx, m.container); err == nil {
				left = append(left, "snapshot "+m.container)
			}
		}
		logs, _ := filepath.Glob(filepath.Join(node.PodLogsDir(), ns+"_*"))
		links, _ := filepath.Glob(filepath.Join(node.ContainerLogsDir(), "*_"+ns+"_*"))
		left = append(append(left, logs...), links...)
		allocs, _ := filepath.Glob(filepath.Join(ipamDir, "*", "*"))
		for _, a := range allocs {
			b, _ := os.ReadFile(a)
			for _, m := range all {
				if strings.Contains(string(b), m.uid) {
					left = append(left, "IPAM "+a)
				}
			}
		}
		left = append(left, orphanNetns(root)...)
		if len(left) > 0 {
			t.Logf("left: %v", left)
		}
		return len(left) == 0
	})
}

func cycle(ns, name string) (uid, containerID string, err error) {
	ctx := context.Background()
	pod := busybox(ns, name, "sleep", "3600")
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	pod.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "secret", MountPath: "/secret"}}
	if _, err := cluster.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", "", err
	}
	p, err := cluster.WaitForPod(ctx, ns, name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		return p.Status.Phase == v1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		return "", "", err
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return "", "", err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	return string(p.UID), strings.TrimPrefix(status(p, "c").ContainerID, "containerd://"), err
}

// orphanNetns lists network namespaces no pod's sandbox refers to.
func orphanNetns(root string) []string {
	used := map[string]bool{}
	states, _ := filepath.Glob(filepath.Join(root, "pods", "*", "sandbox.json"))
	for _, s := range states {
		var sb struct {
			NetNS string `json:"netns"`
		}
		if b, err := os.ReadFile(s); err == nil && json.Unmarshal(b, &sb) == nil {
			used[sb.NetNS] = true
		}
	}
	var out []string
	entries, _ := os.ReadDir(filepath.Join(root, "netns"))
	for _, e := range entries {
		if p := filepath.Join(root, "netns", e.Name()); !used[p] {
			out = append(out, "netns "+p)
		}
	}
	return out
}

// A pod removed from the API while hostlet was down leaves nothing behind
// once hostlet is back: the orphan sweep removes its containers.
func TestOrphanSweepAfterCrash(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	cluster.CreatePod(t, busybox(ns, "orphan", "sleep", "3600"))
	p := waitPhase(t, ns, "orphan", v1.PodRunning)
	id := strings.TrimPrefix(status(p, "c").ContainerID, "containerd://")
	logDir := filepath.Join(node.PodLogsDir(), ns+"_orphan_"+string(p.UID))
	link := filepath.Join(node.ContainerLogsDir(), "orphan_"+ns+"_c-"+id+".log")
	// Checked before the crash: once hostlet is back its sweep may remove the
	// link before the test looks.
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("no log symlink of the running container: %v", err)
	}
	node.Kill()
	zero := int64(0)
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "orphan", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "orphan")
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, time.Minute, "the orphan's container, pod directory and logs to be removed", func() bool {
		_, err := cluster.ContainerdClient().LoadContainer(ctxT(t), id)
		_, dirErr := os.Stat(filepath.Join(node.RootDir(), "pods", string(p.UID)))
		_, logErr := os.Stat(logDir)
		_, linkErr := os.Lstat(link)
		return err != nil && dirErr != nil && logErr != nil && linkErr != nil
	})
}

// A pod that ended before hostlet restarted has no worker; once it is
// deleted, what it left on the host (its container, kept for its logs, pod
// directory, logs and their link) is removed at once, not at the orphan
// sweep's next round minutes later (found on a rebooted host: ended pods
// deleted after the reboot stayed until the sweep). The API removes an
// ended pod with grace 0: when hostlet handles the update that sets its
// deletionTimestamp, a worker resumes (and ends) its termination; when
// that update and the removal come together, RemovePod does the cleanup
// (TestRemovePodWithoutWorkerCleansUp): which one depends on timing.
func TestEndedPodDeletedAfterRestartLeavesNothing(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	cluster.CreatePod(t, busybox(ns, "ended", "sh", "-c", "echo done"))
	p := waitPhase(t, ns, "ended", v1.PodSucceeded)
	id := strings.TrimPrefix(status(p, "c").ContainerID, "containerd://")
	// The first sweep after the restart (releasing the ended pod) is done
	// before the deletion, so the deletion is what cleans up.
	const firstSweep = "pods on the host checked against the API"
	sweeps := func() int {
		b, _ := os.ReadFile(node.LogPath())
		return strings.Count(string(b), firstSweep)
	}
	before := sweeps()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, time.Minute, "the first orphan sweep after the restart", func() bool { return sweeps() > before })
	logDir := filepath.Join(node.PodLogsDir(), ns+"_ended_"+string(p.UID))
	link := filepath.Join(node.ContainerLogsDir(), "ended_"+ns+"_c-"+id+".log")
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("no log symlink of the ended container: %v", err)
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "ended", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "ended")
	// Well within the sweep's 5 minutes.
	pollUntil(t, time.Minute, "the ended pod's container, pod directory and logs to be removed", func() bool {
		_, err := cluster.ContainerdClient().LoadContainer(ctxT(t), id)
		_, dirErr := os.Stat(filepath.Join(node.RootDir(), "pods", string(p.UID)))
		_, logErr := os.Stat(logDir)
		_, linkErr := os.Lstat(link)
		return err != nil && dirErr != nil && logErr != nil && linkErr != nil
	})
}

// waitLogLine waits until the pod's log has the line: the app's own word
// that it got past a step of its start-up.
func waitLogLine(t *testing.T, ns, name, line string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, err := cluster.Client().CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(context.Background())
		if err == nil && strings.Contains("\n"+string(b), "\n"+line+"\n") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s never logged %q", ns, name, line)
}

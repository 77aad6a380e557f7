package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// staticManifest is a static pod's manifest: a busybox that ends at once
// on SIGTERM, marked by env so that an edit changes the pod.
func staticManifest(t *testing.T, ns, name, mark string) []byte {
	t.Helper()
	grace := int64(5)
	pod := &v1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{Name: "c", Image: images.BusyboxRef,
				Env:     []v1.EnvVar{{Name: "MARK", Value: mark}},
				Command: []string{"sh", "-c", "echo static up; trap 'exit 0' TERM; while true; do sleep 1; done"}}},
		},
	}
	b, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeManifest replaces a manifest atomically (a dot file renamed over
// it, as configuration tools write), so no half-written file is read.
func writeManifest(t *testing.T, dir, file string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
		t.Fatal(err)
	}
}

// waitMirror polls a static pod's mirror pod until cond holds: mirror pods
// come and go (deleted, replaced) while it is waited for.
func waitMirror(t *testing.T, ns, name string, cond func(*v1.Pod) bool) (*v1.Pod, error) {
	t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w; last seen: uid %s phase %s annotations %v deleting %v", err, last.UID, last.Status.Phase, last.Annotations, last.DeletionTimestamp)
	}
	return last, err
}

// mirrorRunning waits for the mirror pod of a static pod to be Running with
// its container's ID and, if notHash is not empty, a hash other than it.
func mirrorRunning(t *testing.T, ns, name, notHash string) *v1.Pod {
	t.Helper()
	p, err := waitMirror(t, ns, name, func(p *v1.Pod) bool {
		if p.DeletionTimestamp != nil || p.Annotations[v1.MirrorPodAnnotationKey] == "" || p.Annotations[v1.MirrorPodAnnotationKey] == notHash {
			return false
		}
		return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].ContainerID != "" && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if err != nil {
		t.Fatalf("mirror pod %s/%s never Running: %v", ns, name, err)
	}
	return p
}

// checkMirror checks a mirror pod carries the kubelet's annotations and is
// owned by its Node.
func checkMirror(t *testing.T, p *v1.Pod, nodeName string) {
	t.Helper()
	checkMirrorFrom(t, p, nodeName, "file")
}

// checkMirrorFrom is checkMirror for a pod of the source ("file", "http").
func checkMirrorFrom(t *testing.T, p *v1.Pod, nodeName, source string) {
	t.Helper()
	a := p.Annotations
	if a["kubernetes.io/config.mirror"] != a["kubernetes.io/config.hash"] || a["kubernetes.io/config.hash"] == "" ||
		a["kubernetes.io/config.source"] != source || a["kubernetes.io/config.seen"] == "" {
		t.Errorf("mirror pod annotations: %v", a)
	}
	if _, err := time.Parse(time.RFC3339Nano, a["kubernetes.io/config.seen"]); err != nil {
		t.Errorf("config.seen: %v", err)
	}
	node, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Node" || p.OwnerReferences[0].UID != node.UID ||
		p.OwnerReferences[0].Controller == nil || !*p.OwnerReferences[0].Controller {
		t.Errorf("mirror pod owners: %+v", p.OwnerReferences)
	}
	if p.Spec.NodeName != nodeName {
		t.Errorf("mirror pod on %q", p.Spec.NodeName)
	}
	tolerated := false
	for _, tol := range p.Spec.Tolerations {
		tolerated = tolerated || (tol.Operator == v1.TolerationOpExists && tol.Key == "" && tol.Effect == v1.TaintEffectNoExecute)
	}
	// The kubelet gives a file's pods the toleration, not a URL's.
	if tolerated != (source == "file") {
		t.Errorf("static pod from %s or has the kubelet's NoExecute toleration: %+v", source, p.Spec.Tolerations)
	}
}

// removeStatic removes, when the test ends and before its node stops, a
// static pod's manifest and waits for its containers to be gone: a node
// stopped leaves its pods' containers running.
func removeStatic(t *testing.T, dir, file, podName string) {
	t.Cleanup(func() {
		if err := os.Remove(filepath.Join(dir, file)); err != nil && !os.IsNotExist(err) {
			t.Error(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			ctrs, err := cluster.ContainerdClient().Containers(ctx, fmt.Sprintf(`labels."io.kubernetes.pod.name"==%s`, podName))
			return err == nil && len(ctrs) == 0, nil
		})
		if err != nil {
			t.Errorf("static pod %s's containers still there", podName)
		}
	})
}

// containerGone waits until containerd no longer has the container.
func containerGone(t *testing.T, id string) {
	t.Helper()
	id = strings.TrimPrefix(id, "containerd://")
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.ContainerdClient().LoadContainer(ctx, id)
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("container %s still exists", id)
	}
}

// A static pod from a manifest directory runs, and its mirror pod appears
// with the kubelet's annotations; a mirror deleted by hand is recreated; an
// edited manifest replaces the pod (the old one terminated before the new
// one starts) and its mirror; a removed manifest removes both.
func TestStaticPodLifecycle(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	const node = "static-lifecycle"
	dir := t.TempDir()
	h := extraNode(t, harness.HostletOptions{NodeName: node,
		ExtraArgs: []string{"--pod-manifest-path", dir, "--file-check-frequency", "1h"}})
	name := "web-" + node
	removeStatic(t, dir, "web.yaml", name)
	api := cluster.Client().CoreV1().Pods(ns)

	writeManifest(t, dir, "web.yaml", staticManifest(t, ns, "web", "one"))
	first := mirrorRunning(t, ns, name, "")
	checkMirror(t, first, node)
	if t.Failed() {
		return
	}
	// The kubelet API serves the static pod by its mirror's name.
	logs, err := api.GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctxT(t))
	if err != nil || !strings.Contains(string(logs), "static up") {
		t.Errorf("logs of the mirror pod: %q %v", logs, err)
	}

	t.Run("mirror deleted by hand is recreated", func(t *testing.T) {
		if err := api.Delete(ctxT(t), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		again, err := waitMirror(t, ns, name, func(p *v1.Pod) bool {
			return p.UID != first.UID && p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning &&
				len(p.Status.ContainerStatuses) == 1
		})
		if err != nil {
			t.Fatalf("mirror pod not recreated: %v", err)
		}
		if again.Annotations[v1.MirrorPodAnnotationKey] != first.Annotations[v1.MirrorPodAnnotationKey] {
			t.Errorf("recreated mirror of another pod: %v", again.Annotations)
		}
		// The static pod itself never stopped.
		if got, want := again.Status.ContainerStatuses[0].ContainerID, first.Status.ContainerStatuses[0].ContainerID; got != want {
			t.Errorf("container %s replaced by %s", want, got)
		}
	})

	oldHash := first.Annotations[v1.MirrorPodAnnotationKey]
	oldID := first.Status.ContainerStatuses[0].ContainerID
	var edited *v1.Pod
	t.Run("manifest edited replaces the pod", func(t *testing.T) {
		writeManifest(t, dir, "web.yaml", staticManifest(t, ns, "web", "two"))
		edited = mirrorRunning(t, ns, name, oldHash)
		checkMirror(t, edited, node)
		if got := edited.Spec.Containers[0].Env[0].Value; got != "two" {
			t.Errorf("mirror pod of the old manifest: MARK=%s", got)
		}
		containerGone(t, oldID)
		// The old pod was terminated before the new one was admitted.
		log, _ := os.ReadFile(h.LogPath())
		term := strings.Index(string(log), "static pod terminated")
		admitted := strings.LastIndex(string(log), "pod admitted")
		if term < 0 || admitted < term {
			t.Errorf("new static pod admitted (log offset %d) before the old one terminated (%d)", admitted, term)
		}
	})
	if edited == nil {
		return
	}

	t.Run("manifest removed removes the pod and its mirror", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := api.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("mirror pod still there: %v", err)
		}
		containerGone(t, edited.Status.ContainerStatuses[0].ContainerID)
	})

	// As kubeadm upgrades do (the manifest moved out and back), the same
	// manifest again is the same pod (UID), which runs again.
	t.Run("manifest put back runs the pod again", func(t *testing.T) {
		writeManifest(t, dir, "web.yaml", staticManifest(t, ns, "web", "two"))
		back := mirrorRunning(t, ns, name, "")
		if back.Annotations[v1.MirrorPodAnnotationKey] != edited.Annotations[v1.MirrorPodAnnotationKey] {
			t.Errorf("the same manifest gave hash %s, before %s", back.Annotations[v1.MirrorPodAnnotationKey], edited.Annotations[v1.MirrorPodAnnotationKey])
		}
	})

	// Removed and put back at once (the node e2e suite's mirror pod
	// recreation spec): the same UID runs again, its container's restart
	// count going on from the earlier run's (the kubelet's dead container
	// of it), and its mirror Running again over that run's end.
	t.Run("manifest removed and put back at once restarts the pod", func(t *testing.T) {
		before := mirrorRunning(t, ns, name, "")
		if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
			t.Fatal(err)
		}
		writeManifest(t, dir, "web.yaml", staticManifest(t, ns, "web", "two"))
		again, err := waitMirror(t, ns, name, func(p *v1.Pod) bool {
			return p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Running != nil &&
				p.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID
		})
		if err != nil {
			t.Fatalf("static pod not Running again: %v", err)
		}
		if got, want := again.Status.ContainerStatuses[0].RestartCount, before.Status.ContainerStatuses[0].RestartCount+1; got != want {
			t.Errorf("restart count %d after the pod ran again, want %d", got, want)
		}
	})
}

// A hostlet started while the API server is unreachable runs its static
// pods; once it reaches the API (restarted with a working kubeconfig) the
// mirror pod appears, and the restart kept the container.
func TestStaticPodWithoutAPIServer(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	const node = "static-noapi"
	dir := t.TempDir()
	good, err := cluster.NodeKubeconfig(node)
	if err != nil {
		t.Fatal(err)
	}
	goodData, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// The same identity at an address nothing listens on (loopback port 1).
	deadData := []byte(strings.ReplaceAll(string(goodData), cluster.APIServerURL(), "https://127.0.0.1:1"))
	if string(deadData) == string(goodData) {
		t.Fatalf("API server URL %s not in the kubeconfig", cluster.APIServerURL())
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, deadData, 0o600); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, dir, "agent.yaml", staticManifest(t, ns, "agent", "one"))
	h := extraNode(t, harness.HostletOptions{NodeName: node, NoWaitReady: true,
		ExtraArgs: []string{"--kubeconfig", kubeconfig, "--pod-manifest-path", dir}})
	name := "agent-" + node
	removeStatic(t, dir, "agent.yaml", name)

	// Its container runs, found in containerd by the pod's name.
	var id string
	err = wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ctrs, err := cluster.ContainerdClient().Containers(ctx, fmt.Sprintf(`labels."io.kubernetes.pod.name"==%s`, name))
		if err != nil {
			return false, err
		}
		for _, c := range ctrs {
			task, err := c.Task(ctx, nil)
			if err != nil {
				continue
			}
			if st, err := task.Status(ctx); err == nil && st.Status == "running" {
				id = c.ID()
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("static pod not running without the API server: %v (log %s)", err, h.LogPath())
	}
	if h.Exited() {
		t.Fatalf("hostlet exited (log %s)", h.LogPath())
	}

	// The API server comes back (for this node): restarted, hostlet keeps
	// the container and mirrors the pod.
	if err := os.WriteFile(kubeconfig, goodData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mirror := mirrorRunning(t, ns, name, "")
	checkMirror(t, mirror, node)
	if got := strings.TrimPrefix(mirror.Status.ContainerStatuses[0].ContainerID, "containerd://"); got != id {
		t.Errorf("container %s replaced by %s across the restart", id, got)
	}
	if rc := mirror.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Errorf("restart count %d", rc)
	}
	// The orphan sweep, once the API's pods are known, leaves the static
	// pod (never in the API under its own UID) alone.
	err = wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		log, err := os.ReadFile(h.LogPath())
		return err == nil && strings.Count(string(log), "pods on the host checked against the API") >= 1, nil
	})
	if err != nil {
		t.Fatalf("no orphan sweep after the restart (log %s)", h.LogPath())
	}
	task, err := cluster.ContainerdClient().LoadContainer(ctxT(t), id)
	if err != nil {
		t.Fatalf("container %s gone after the sweep: %v", id, err)
	}
	if tk, err := task.Task(ctxT(t), nil); err != nil {
		t.Errorf("container %s has no task after the sweep: %v", id, err)
	} else if st, err := tk.Status(ctxT(t)); err != nil || st.Status != "running" {
		t.Errorf("container %s after the sweep: %v %v", id, st.Status, err)
	}
}

// A static pod is critical: on a node full of pods (--max-pods 1) it
// preempts a best-effort API pod, which ends Failed with the kubelet's
// reason and DisruptionTarget condition, and then runs.
func TestStaticPodPreempts(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	const node = "static-preempt"
	dir := t.TempDir()
	extraNode(t, harness.HostletOptions{NodeName: node, ExtraArgs: []string{"--pod-manifest-path", dir, "--max-pods", "1"}})
	victim := busybox(ns, "victim", "sleep", "3600")
	victim.Spec.NodeName = node
	grace := int64(1)
	victim.Spec.TerminationGracePeriodSeconds = &grace
	cluster.CreatePod(t, victim)
	waitPhase(t, ns, "victim", v1.PodRunning)

	name := "critical-" + node
	removeStatic(t, dir, "critical.yaml", name)
	writeManifest(t, dir, "critical.yaml", staticManifest(t, ns, "critical", "one"))
	mirrorRunning(t, ns, name, "")
	// (Its final status is written asynchronously, as every status.)
	got, err := cluster.WaitForPod(ctxT(t), ns, "victim", 2*time.Minute, harness.PodPhase(v1.PodFailed))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodFailed || got.Status.Reason != "Preempting" || got.Status.Message != "Preempted in order to admit critical pod" {
		t.Errorf("victim: phase %s reason %q message %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	found := false
	for _, c := range got.Status.Conditions {
		found = found || (c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonTerminationByKubelet)
	}
	if !found {
		t.Errorf("victim conditions %+v", got.Status.Conditions)
	}
}

// Static pods from --manifest-url, fetched with --manifest-url-header: the
// URL's pod runs and is mirrored; once the URL serves nothing it is gone.
func TestStaticPodFromURL(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	const node = "static-url"
	name := "fromurl-" + node
	var mu sync.Mutex
	body := staticManifest(t, ns, "fromurl", "one")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != "secret" {
			http.Error(w, "no token", http.StatusForbidden)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		// Served nothing, the node stops the pod before it stops itself.
		mu.Lock()
		body = nil
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			ctrs, err := cluster.ContainerdClient().Containers(ctx, fmt.Sprintf(`labels."io.kubernetes.pod.name"==%s`, name))
			return err == nil && len(ctrs) == 0, nil
		})
	})
	extraNode(t, harness.HostletOptions{NodeName: node, ExtraArgs: []string{"--manifest-url", srv.URL,
		"--manifest-url-header", "X-Token:secret", "--http-check-frequency", "1s"}})
	mirror := mirrorRunning(t, ns, name, "")
	checkMirrorFrom(t, mirror, node, "http")

	mu.Lock()
	body = nil
	mu.Unlock()
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("mirror pod still there once the URL serves nothing: %v", err)
	}
	containerGone(t, mirror.Status.ContainerStatuses[0].ContainerID)
}

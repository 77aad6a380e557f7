package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/hostlet/hostlet/test/harness"
	testimages "github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// imageGCNamespace gives an image GC test a containerd namespace of its
// own, so the shared node's images are out of its reach, holding busybox,
// testapp and testapp-stopsignal; its images are removed with the test.
func imageGCNamespace(t *testing.T, ctrdNS string) (*containerd.Client, context.Context) {
	t.Helper()
	cl := cluster.ContainerdClient()
	nctx := namespaces.WithNamespace(context.Background(), ctrdNS)
	t.Cleanup(func() {
		imgs, _ := cl.ImageService().List(nctx)
		for _, img := range imgs {
			_ = cl.ImageService().Delete(nctx, img.Name)
		}
	})
	for _, ref := range []string{testimages.BusyboxRef, testimages.TestappRef, testimages.TestappStopSignalRef} {
		if _, err := harness.ImportArchive(ctxT(t), cl, ctrdNS, localImage(t, ref).Archive); err != nil {
			t.Fatal(err)
		}
	}
	return cl, nctx
}

// Image GC over its high threshold removes an unused image and keeps the
// one a container uses and a pinned one, with the kubelet's events when it
// cannot free enough. The node has a containerd namespace of its own, so
// the shared node's images are out of reach; a high threshold of 1% makes
// this disk's usage cross it without filling anything.
func TestImageGC(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-imagegc"
	const ctrdNS = "hostlet-imagegc"
	cl, nctx := imageGCNamespace(t, ctrdNS)
	// Pinned as containerd's CRI plugin pins its sandbox image.
	pinned, err := cl.ImageService().Get(nctx, testimages.TestappStopSignalRef)
	if err != nil {
		t.Fatal(err)
	}
	if pinned.Labels == nil {
		pinned.Labels = map[string]string{}
	}
	pinned.Labels["io.cri-containerd.pinned"] = "pinned"
	if _, err := cl.ImageService().Update(nctx, pinned, "labels.io.cri-containerd.pinned"); err != nil {
		t.Fatal(err)
	}

	// Images are safe for their first 30 s: time for the pod to use one.
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--containerd-namespace", ctrdNS,
		"--image-gc-high-threshold", "1",
		"--image-gc-low-threshold", "0",
		"--image-minimum-gc-age", "30s",
		"--image-gc-period", "2s",
	}})
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "user", "sleep", "3600")
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)

	present := func() []string {
		imgs, err := cl.ImageService().List(nctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, img := range imgs {
			out = append(out, img.Name)
		}
		slices.Sort(out)
		return out
	}
	deadline := time.Now().Add(2 * time.Minute)
	for slices.Contains(present(), testimages.TestappRef) {
		if time.Now().After(deadline) {
			t.Fatalf("unused image never removed: %q", present())
		}
		time.Sleep(time.Second)
	}
	// A few more collections: what is used or pinned stays.
	time.Sleep(5 * time.Second)
	if got, want := present(), []string{testimages.BusyboxRef, testimages.TestappStopSignalRef}; !slices.Equal(got, want) {
		t.Errorf("images %q, want %q", got, want)
	}
	if _, err := cl.ImageService().Get(nctx, testimages.TestappRef); err == nil {
		t.Errorf("%s still there", testimages.TestappRef)
	}
	// Counted as the kubelet counts it, by reason.
	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")
	if v, _ := sample(scrapeAt(t, h.Port(), "/metrics", metricsToken), "kubelet_image_garbage_collected_total", map[string]string{"reason": "space"}); v < 1 {
		t.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v, want ≥ 1", v)
	}

	// Nothing more can go: the kubelet's events on the node.
	reasons := map[string]string{}
	deadline = time.Now().Add(time.Minute)
	for len(reasons) < 2 && time.Now().Before(deadline) {
		evs, err := cluster.Client().CoreV1().Events("default").List(ctxT(t), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name}.String(),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == "FreeDiskSpaceFailed" || e.Reason == "ImageGCFailed" {
				reasons[e.Reason] = e.Message
			}
		}
		time.Sleep(time.Second)
	}
	for _, r := range []string{"FreeDiskSpaceFailed", "ImageGCFailed"} {
		if !strings.HasPrefix(reasons[r], "Insufficient free disk space on the node's image filesystem (") {
			t.Errorf("%s event: %q", r, reasons[r])
		}
	}
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodRunning {
		t.Errorf("the user pod: %v", err)
	}
}

// Dead-container GC at its strictest never removes what the pod status
// needs: after two restarts the previous instance (lastState, --previous)
// is still there; the one before it is gone with its log.
func TestContainerGCKeepsPrevious(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-containergc"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--maximum-dead-containers-per-container", "0",
		"--maximum-dead-containers", "0",
		"--container-gc-period", "1s",
	}})
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "crasher", "sh", "-c", `n=$(cat /data/n 2>/dev/null || echo 0); echo run $n; echo $((n+1)) > /data/n
if [ $n -ge 2 ]; then exec sleep 3600; fi
exit 3`)
	pod.Spec.NodeName = name
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod = cluster.CreatePod(t, pod)
	if _, err := cluster.WaitForPod(ctxT(t), ns, pod.Name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 2 && cs[0].State.Running != nil, nil
	}); err != nil {
		t.Fatalf("never on its third run: %v", err)
	}
	// Several collections.
	time.Sleep(4 * time.Second)
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
		t.Errorf("lastState %+v", p.Status.ContainerStatuses[0].LastTerminationState)
	}
	prev, err := cluster.Client().CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Previous: true}).DoRaw(ctxT(t))
	if err != nil || string(prev) != "run 1\n" {
		t.Errorf("--previous = %q, %v", prev, err)
	}
	dir := filepath.Join(h.PodLogsDir(), ns+"_"+pod.Name+"_"+string(pod.UID), "c")
	var logs []string
	if es, err := os.ReadDir(dir); err == nil {
		for _, e := range es {
			logs = append(logs, e.Name())
		}
	}
	if want := []string{"1.log", "2.log"}; !slices.Equal(logs, want) {
		t.Errorf("log files %q, want %q", logs, want)
	}
	ctrs, err := cluster.ContainerdClient().Containers(namespaces.WithNamespace(context.Background(), harness.ContainerdNamespace),
		`labels."io.kubernetes.pod.uid"==`+string(pod.UID))
	if err != nil || len(ctrs) != 2 {
		t.Errorf("%d containers of the pod in containerd, want 2 (%v)", len(ctrs), err)
	}
}

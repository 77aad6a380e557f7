package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/hostlet/hostlet/test/harness"
	testimages "github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Image GC over its high threshold removes an unused image and keeps the
// one a container uses and a pinned one, with the kubelet's events when it
// cannot free enough. The node has a containerd namespace of its own, so
// the shared node's images are out of reach; a high threshold of 1% makes
// this disk's usage cross it without filling anything.
func TestImageGC(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-imagegc"
	const ctrdNS = "hostlet-imagegc"
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
	extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
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

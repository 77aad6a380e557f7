package staticpod

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakePods records what the manager hands the node; a pod handed with a
// deletionTimestamp is done when the test says.
type fakePods struct {
	mu     sync.Mutex
	synced []*v1.Pod
	done   map[types.UID]chan struct{}
}

func (f *fakePods) SyncPod(_ context.Context, pod *v1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced = append(f.synced, pod)
	if f.done[pod.UID] == nil {
		f.done[pod.UID] = make(chan struct{})
	}
	return nil
}

func (f *fakePods) Done(uid types.UID) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[uid]
}

// pod is the i-th pod handed.
func (f *fakePods) pod(i int) *v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced[i]
}

func (f *fakePods) finish(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.done[uid])
}

// calls lists the handed pods as "<manifest MARK>" or "-<MARK>" for a
// termination.
func (f *fakePods) calls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.synced {
		mark := p.Spec.Containers[0].Image
		if p.DeletionTimestamp != nil {
			mark = "-" + mark
		}
		out = append(out, mark)
	}
	return strings.Join(out, ",")
}

type fakeStatuses struct {
	mu     sync.Mutex
	forgot []types.UID
}

func (s *fakeStatuses) Forget(uid types.UID) {
	s.mu.Lock()
	s.forgot = append(s.forgot, uid)
	s.mu.Unlock()
}

// eventually waits for cond (the test's own timeout bounds it).
// eventually waits for cond, at most 30 s (not until the test binary's
// deadline: under go test ./... that is the whole run's).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func image(img string) string { return strings.Replace(manifest, "image: busybox", "image: "+img, 1) }

// The manager runs a manifest's pod, mirrors it, recreates a mirror deleted
// by hand, replaces the pod on an edit only once the old one is done, and
// removes pod and mirror with the manifest.
func TestManager(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "web.yaml")
	write(t, file, image("one"))
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "node-uid"}}
	client := fake.NewSimpleClientset(node)
	factory := informers.NewSharedInformerFactory(client, 0)
	podInf, nodeInf := factory.Core().V1().Pods().Informer(), factory.Core().V1().Nodes().Informer()
	statuses := &fakeStatuses{}
	m := New(Config{NodeName: "n", ManifestPath: dir, FileCheckFrequency: time.Hour, Client: client,
		PodInformer: podInf, NodeInformer: nodeInf, Statuses: statuses, Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := &fakePods{done: map[types.UID]chan struct{}{}}
	if m.HasSynced() {
		t.Error("synced before reading its sources")
	}
	go m.Run(ctx, pods)
	factory.Start(ctx.Done())

	mirror := func() *v1.Pod {
		p, err := client.CoreV1().Pods("default").Get(ctx, "web-n", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	eventually(t, "pod handed and mirrored", func() bool { return pods.calls() == "one" && mirror() != nil })
	if !m.HasSynced() {
		t.Error("not synced")
	}
	first := mirror()
	static := pods.pod(0)
	if first.Annotations[ConfigMirrorAnnotation] != string(static.UID) || first.Annotations[ConfigSourceAnnotation] != FileSource ||
		first.Annotations[ConfigFirstSeenAnnotation] == "" || first.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("mirror %+v", first.ObjectMeta)
	}

	// Deleted by hand: recreated (the fake API gives no UID: told apart
	// by the deletion having been seen).
	creates := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "create" && a.GetResource().Resource == "pods" {
				n++
			}
		}
		return n
	}
	// Counted from here: a create the manager made before its informer saw
	// the first mirror (refused as AlreadyExists) counts too.
	before := creates()
	if err := client.CoreV1().Pods("default").Delete(ctx, "web-n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirror recreated", func() bool { return creates() > before && mirror() != nil })

	// Edited: the old pod is terminated; the new one waits for it.
	write(t, file, image("two"))
	eventually(t, "old pod terminated", func() bool { return pods.calls() == "one,-one" })
	if got := pods.pod(1).DeletionGracePeriodSeconds; got == nil || *got != 30 {
		t.Errorf("grace %v", got)
	}
	if p := mirror(); p == nil || p.Annotations[ConfigMirrorAnnotation] != string(static.UID) {
		t.Error("the old pod's mirror went before the pod")
	}
	pods.finish(static.UID)
	eventually(t, "new pod handed and mirrored", func() bool {
		p := mirror()
		return pods.calls() == "one,-one,two" && p != nil && p.Annotations[ConfigMirrorAnnotation] == string(pods.pod(2).UID)
	})
	eventually(t, "old status forgotten", func() bool {
		statuses.mu.Lock()
		defer statuses.mu.Unlock()
		return len(statuses.forgot) == 1 && statuses.forgot[0] == static.UID
	})

	// Removed: terminated, then its mirror deleted.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod terminated", func() bool { return pods.calls() == "one,-one,two,-two" })
	if mirror() == nil {
		t.Error("mirror deleted before its pod was done")
	}
	pods.finish(pods.pod(2).UID)
	eventually(t, "mirror deleted", func() bool { return mirror() == nil })
}

// A mirror pod no static pod stands for (its manifest removed while hostlet
// was down) is deleted once the sources have been read; one of a static
// pod the node still runs is kept.
func TestManagerOrphanMirror(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "web.yaml"), manifest)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "node-uid"}}
	want, err := Decode([]byte(manifest), filepath.Join(dir, "web.yaml"), true, "n")
	if err != nil {
		t.Fatal(err)
	}
	kept := Mirror(want[0], node)
	kept.UID = "kept"
	orphan := Mirror(want[0], node)
	orphan.Name, orphan.UID = "gone-n", "orphan"
	orphan.Annotations[ConfigMirrorAnnotation] = "some-old-hash"
	client := fake.NewSimpleClientset(node, kept, orphan)
	factory := informers.NewSharedInformerFactory(client, 0)
	m := New(Config{NodeName: "n", ManifestPath: dir, FileCheckFrequency: time.Hour, Client: client,
		PodInformer: factory.Core().V1().Pods().Informer(), NodeInformer: factory.Core().V1().Nodes().Informer(),
		Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx, &fakePods{done: map[types.UID]chan struct{}{}})
	factory.Start(ctx.Done())
	eventually(t, "orphan deleted", func() bool {
		_, err := client.CoreV1().Pods("default").Get(ctx, "gone-n", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if p, err := client.CoreV1().Pods("default").Get(ctx, "web-n", metav1.GetOptions{}); err != nil || p.UID != "kept" {
		t.Errorf("the running pod's mirror: %v %v", p, err)
	}
}

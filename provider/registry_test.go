package provider

import (
	"context"
	"k8s.io/utils/clock"
	"testing"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func registryPod(name string, uid types.UID) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
}

// testRegistry is a provider with workers registered but not running, and
// an API view (the informer cache) the test fills.
func testRegistry(t *testing.T) (*Provider, cache.Indexer) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	p := &Provider{ctx: context.Background(), Registry: NewRegistry(), lister: corelisters.NewPodLister(idx),
		teardowns: map[types.UID]chan struct{}{}, clock: clock.RealClock{}}
	return p, idx
}

func (p *Provider) register(pod *v1.Pod) {
	p.pods[pod.UID] = &podEntry{worker: lifecycle.NewPod(pod, lifecycle.Config{}), cancel: func() {}}
	p.byName[key(pod.Namespace, pod.Name)] = pod.UID
}

// An old incarnation still terminating never stands in for a new pod of
// the same name: GetPod (the kubelet API's look-up by name) says NotFound,
// and once the new one runs it answers with it.
func TestGetPodByUID(t *testing.T) {
	p, api := testRegistry(t)
	old := registryPod("web-0", "old")
	p.register(old)
	// Before any status: the admitted object, so a delete reaches it.
	_ = api.Add(old)
	got, err := p.GetPod(context.Background(), "ns", "web-0")
	if err != nil || got.UID != "old" {
		t.Fatalf("GetPod before the first status = %v, %v", got, err)
	}
	// The API object is replaced by a new pod of the same name.
	_ = api.Delete(old)
	fresh := registryPod("web-0", "new")
	_ = api.Add(fresh)
	if _, err := p.GetPod(context.Background(), "ns", "web-0"); !errdefs.IsNotFound(err) {
		t.Fatalf("GetPod with a newer pod in the API = %v, want NotFound", err)
	}
	if pods, _ := p.GetPods(context.Background()); len(pods) != 0 {
		t.Fatalf("GetPods lists the old incarnation: %v", pods)
	}
	p.register(fresh)
	got, err = p.GetPod(context.Background(), "ns", "web-0")
	if err != nil || got.UID != "new" {
		t.Fatalf("GetPod after the new pod was created = %v, %v", got, err)
	}
	// The old worker is still there, reachable by UID.
	if p.pods["old"] == nil {
		t.Fatal("old incarnation dropped before its teardown")
	}
	// A force delete of the new pod while the old one is listed reaches
	// the new one.
	_ = api.Delete(fresh)
	got, err = p.GetPod(context.Background(), "ns", "web-0")
	if err != nil || got.UID != "new" {
		t.Fatalf("GetPod after the new pod left the API = %v, %v", got, err)
	}
}

// Admission counts every admitted pod from the moment of admission, also
// those whose worker has not computed a status yet.
func TestAdmittedPodsCountsUnsynced(t *testing.T) {
	p, _ := testRegistry(t)
	for i, uid := range []types.UID{"a", "b", "c"} {
		pod := registryPod("p"+string(uid), uid)
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
		if i == 2 {
			pod.Status.Phase = v1.PodSucceeded
		}
		p.register(pod)
	}
	running := p.admittedPods()
	if len(running) != 2 {
		t.Fatalf("admitted pods = %d, want 2 (the unsynced ones, not the finished one)", len(running))
	}
	// With room for three pods, as admission counts them (node/admit.go).
	p.register(registryPod("x", "x"))
	if n := len(p.admittedPods()); n != 3 {
		t.Fatalf("admitted pods = %d, want 3", n)
	}
}

// A panic while a pod is handed over (here: no node to admit it against)
// is answered with an error, which podsync retries, and leaves the
// registry's lock free for every other pod.
func TestSyncPodPanicReleasesTheLock(t *testing.T) {
	p, _ := testRegistry(t)
	err := p.SyncPod(context.Background(), registryPod("web-0", "u1"))
	if err == nil {
		t.Fatal("SyncPod survived a nil node without an error")
	}
	if !p.mu.TryLock() {
		t.Fatal("the registry lock is still held after a recovered panic")
	}
	p.mu.Unlock()
}

// A pod that ended before hostlet restarted is never started again (its
// volumes may be gone; p.node is nil, so an admission would panic), and is
// still found by name for its logs.
func TestEndedPodNotStarted(t *testing.T) {
	p, api := testRegistry(t)
	pod := registryPod("done", "u1")
	pod.Status.Phase = v1.PodSucceeded
	_ = api.Add(pod)
	if err := p.SyncPod(context.Background(), pod); err != nil || len(p.pods) != 0 {
		t.Fatalf("SyncPod of an ended pod = %v, %d workers", err, len(p.pods))
	}
	if got, err := p.GetPod(context.Background(), "ns", "done"); err != nil || got.UID != "u1" || got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("GetPod of an ended pod without a worker = %v, %v", got, err)
	}
	running := registryPod("running", "u2")
	_ = api.Add(running)
	if _, err := p.GetPod(context.Background(), "ns", "running"); !errdefs.IsNotFound(err) {
		t.Fatalf("GetPod of a running pod without a worker = %v, want NotFound", err)
	}
}

// A pod removed from the API is stopped at once by UID, whatever its name
// holds now.
func TestRemovePodByUID(t *testing.T) {
	p, _ := testRegistry(t)
	host := newCleanupHost()
	p.host = host
	old := registryPod("web-0", "old")
	p.register(old)
	p.register(registryPod("web-0", "new"))
	if err := p.RemovePod(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	got := p.pods["old"].worker.Object()
	if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 0 {
		t.Fatalf("removed pod's worker has %v/%v, want deletion now with grace 0", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
	}
	if old.DeletionTimestamp != nil {
		t.Fatal("RemovePod changed the informer's object")
	}
	if p.pods["new"].worker.Object().DeletionTimestamp != nil {
		t.Fatal("the new pod of the same name was stopped")
	}
	if err := p.RemovePod(context.Background(), registryPod("other", "unknown")); err != nil || len(p.pods) != 2 {
		t.Fatalf("RemovePod of an unknown pod = %v, %d workers", err, len(p.pods))
	}
	if got := <-host.cleaned; got != "unknown ns/other" {
		t.Fatalf("cleaned %q, want the unknown pod only", got)
	}
}

// cleanupHost records the pods cleaned up (on goroutines of their own).
type cleanupHost struct {
	Host
	cleaned chan string
}

func newCleanupHost() *cleanupHost { return &cleanupHost{cleaned: make(chan string, 10)} }

func (h *cleanupHost) Cleanup(_ context.Context, uid, namespace, name string) error {
	h.cleaned <- uid + " " + namespace + "/" + name
	return nil
}

// A pod that ended before hostlet restarted has no worker; when the API's
// removal comes without the update setting its deletionTimestamp having
// been handled (podsync coalesces them), what it left on the host is
// cleaned up at once, once, not at the next orphan sweep. A pod whose
// worker finished and cleaned up already is not cleaned again.
func TestRemovePodWithoutWorkerCleansUp(t *testing.T) {
	p, api := testRegistry(t)
	host := newCleanupHost()
	p.host = host
	done := registryPod("job-x", "ended")
	done.Status.Phase = v1.PodSucceeded
	_ = api.Add(done)
	if err := p.SyncPod(context.Background(), done); err != nil || len(p.pods) != 0 {
		t.Fatalf("SyncPod of an ended pod = %v, %d workers", err, len(p.pods))
	}
	_ = api.Delete(done)
	for range 2 {
		if err := p.RemovePod(context.Background(), done); err != nil {
			t.Fatal(err)
		}
	}
	if got := <-host.cleaned; got != "ended ns/job-x" {
		t.Fatalf("cleaned %q", got)
	}
	p.mu.Lock()
	p.gone["finished"] = time.Now() // its worker's terminated() cleaned it
	p.mu.Unlock()
	if err := p.RemovePod(context.Background(), registryPod("web", "finished")); err != nil {
		t.Fatal(err)
	}
	p.cleanups.Wait()
	if len(host.cleaned) != 0 {
		t.Fatalf("cleaned again: %q", <-host.cleaned)
	}
}

package podsync

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// testStatuses is a status writer over a fake API holding pods, whose
// informer cache the test fills.
func testStatuses(t *testing.T, pods ...*v1.Pod) (*Statuses, *fake.Clientset, cache.Indexer) {
	objs := make([]runtime.Object, 0, len(pods))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		objs = append(objs, p)
		_ = idx.Add(p)
	}
	client := fake.NewClientset(objs...)
	s := NewStatuses(client, corelisters.NewPodLister(idx))
	t.Cleanup(s.queue.ShutDown)
	return s, client, idx
}

func withPhase(pod *v1.Pod, phase v1.PodPhase) *v1.Pod {
	out := pod.DeepCopy()
	out.Status.Phase = phase
	return out
}

func statusWrites(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// drain empties the queue as workers would, without writing.
func drain(s *Statuses) {
	for s.queue.Len() > 0 {
		uid, _ := s.queue.Get()
		s.queue.Done(uid)
	}
}

func mustSync(t *testing.T, s *Statuses, uid types.UID) {
	t.Helper()
	if err := s.sync(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
}

// The latest status wins, and a status the API has already is not written.
func TestStatusesWriteLatestOnce(t *testing.T) {
	pod := testPod("web-0", "u1", "1")
	s, client, _ := testStatuses(t, pod)
	s.Set(withPhase(pod, v1.PodPending))
	s.Set(withPhase(pod, v1.PodRunning))
	mustSync(t, s, "u1")
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metavOpts)
	if got.Status.Phase != v1.PodRunning || statusWrites(client) != 1 {
		t.Fatalf("phase %s after %d writes, want Running after 1", got.Status.Phase, statusWrites(client))
	}
	// Again, with the API's answer not yet in the cache: nothing to write.
	mustSync(t, s, "u1")
	if statusWrites(client) != 1 {
		t.Fatalf("%d writes, want 1", statusWrites(client))
	}
}

// A status going back to one the stale cache still shows is written: the
// base is the API's answer to the last write until the cache shows it.
func TestStatusesStaleCache(t *testing.T) {
	pod := withPhase(testPod("web-0", "u1", "1"), v1.PodPending)
	s, client, idx := testStatuses(t, pod)
	running := withPhase(pod, v1.PodRunning)
	s.Set(running)
	mustSync(t, s, "u1")
	s.Set(withPhase(pod, v1.PodPending))
	mustSync(t, s, "u1")
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metavOpts)
	if got.Status.Phase != v1.PodPending || statusWrites(client) != 2 {
		t.Fatalf("phase %s after %d writes, want Pending after 2", got.Status.Phase, statusWrites(client))
	}
	// The echo of the last write: the cache caught up, nothing is queued.
	drain(s)
	_ = idx.Update(got)
	s.observed(got)
	if s.queue.Len() != 0 {
		t.Fatal("the echo of the last write was queued")
	}
	s.mu.Lock()
	caughtUp := s.pods["u1"].written == nil
	s.mu.Unlock()
	if !caughtUp {
		t.Fatal("the echo of the last write did not clear it")
	}
}

// Someone else's change of the status (the node lifecycle controller
// marking the pod not ready) is corrected.
func TestStatusesCorrectOthersWrite(t *testing.T) {
	pod := testPod("web-0", "u1", "1")
	ready := withPhase(pod, v1.PodRunning)
	ready.Status.Conditions = []v1.PodCondition{cond(v1.PodReady, v1.ConditionTrue)}
	s, client, idx := testStatuses(t, ready)
	s.Set(ready)
	mustSync(t, s, "u1")
	if statusWrites(client) != 0 {
		t.Fatal("a status the API has was written")
	}
	marked := ready.DeepCopy()
	marked.ResourceVersion = "7"
	marked.Status.Conditions[0].Status = v1.ConditionFalse
	_, _ = client.CoreV1().Pods("ns").UpdateStatus(context.Background(), marked, updateOpts)
	_ = idx.Update(marked)
	drain(s)
	s.observed(marked)
	if s.queue.Len() != 1 {
		t.Fatal("someone else's change is not queued")
	}
	mustSync(t, s, "u1")
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metavOpts)
	if got.Status.Conditions[0].Status != v1.ConditionTrue {
		t.Fatalf("Ready = %s, want corrected to True", got.Status.Conditions[0].Status)
	}
}

// A status is written on the pod of its UID only; a pod gone from the API,
// or replaced by a new pod of its name, is forgotten without a write.
func TestStatusesGonePod(t *testing.T) {
	s, client, _ := testStatuses(t, testPod("web-0", "new", "5"))
	s.Set(withPhase(testPod("web-0", "old", "1"), v1.PodSucceeded))
	s.Set(withPhase(testPod("web-1", "other", "1"), v1.PodRunning))
	mustSync(t, s, "old")
	mustSync(t, s, "other")
	if statusWrites(client) != 0 || len(s.pods) != 0 {
		t.Fatalf("%d writes, %d pods kept; want none", statusWrites(client), len(s.pods))
	}
}

// A conflict (the cache was older than the API) is retried on the API's
// current object; a NotFound answer is expected and forgets the pod.
func TestStatusesConflictAndNotFound(t *testing.T) {
	pod := testPod("web-0", "u1", "1")
	s, client, _ := testStatuses(t, pod)
	conflicts := 1
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(v1.Resource("pods"), "web-0", nil)
		}
		return false, nil, nil
	})
	s.Set(withPhase(pod, v1.PodRunning))
	mustSync(t, s, "u1")
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metavOpts)
	if got.Status.Phase != v1.PodRunning {
		t.Fatalf("phase %s after a conflict, want Running", got.Status.Phase)
	}
	_ = client.CoreV1().Pods("ns").Delete(context.Background(), "web-0", deleteOpts)
	s.Set(withPhase(pod, v1.PodSucceeded))
	mustSync(t, s, "u1")
	if len(s.pods) != 0 {
		t.Fatal("a pod gone from the API is still kept")
	}
}

var (
	metavOpts  = metav1.GetOptions{}
	updateOpts = metav1.UpdateOptions{}
	deleteOpts = metav1.DeleteOptions{}
)

// WaitWritten returns once the newest status handed over is in the API, not
// when an older one is, and at once for a pod forgotten or never seen.
func TestStatusesWaitWritten(t *testing.T) {
	pod := testPod("web-0", "u1", "1")
	s, client, _ := testStatuses(t, pod)
	ctx := context.Background()
	if err := s.WaitWritten(ctx, "unknown"); err != nil {
		t.Fatalf("a pod never seen: %v", err)
	}
	s.Set(withPhase(pod, v1.PodRunning))
	done := make(chan error, 1)
	go func() { done <- s.WaitWritten(ctx, "u1") }()
	select {
	case err := <-done:
		t.Fatalf("returned %v before the write", err)
	case <-time.After(50 * time.Millisecond):
	}
	mustSync(t, s, "u1")
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A status handed over after a sync began is still owed.
	s.Set(withPhase(pod, v1.PodFailed))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.WaitWritten(short, "u1"); err == nil {
		t.Fatal("returned before the Failed status was written")
	}
	mustSync(t, s, "u1")
	if err := s.WaitWritten(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Pods("ns").Get(ctx, "web-0", metavOpts)
	if got.Status.Phase != v1.PodFailed {
		t.Fatalf("phase %s, want Failed", got.Status.Phase)
	}

	// A pod gone from the API owes nothing.
	s.Set(withPhase(pod, v1.PodSucceeded))
	go func() { done <- s.WaitWritten(ctx, "u1") }()
	s.Forget("u1")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A static pod's status is written to its mirror pod (another UID); with
// no mirror it is kept, nobody waits on it, and a mirror that appears gets
// it.
func TestStatusesStaticPodToMirror(t *testing.T) {
	static := testPod("web-n", "static-uid", "")
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "static-uid"}
	s, client, idx := testStatuses(t)
	s.Set(withPhase(static, v1.PodRunning))
	mustSync(t, s, "static-uid")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitWritten(ctx, "static-uid"); err != nil {
		t.Errorf("waiting on a static pod without a mirror: %v", err)
	}
	if statusWrites(client) != 0 {
		t.Fatalf("%d writes without a mirror", statusWrites(client))
	}
	mirror := testPod("web-n", "mirror-uid", "5")
	mirror.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "static-uid",
		v1.MirrorPodAnnotationKey: "static-uid"}
	if _, err := client.CoreV1().Pods("ns").Create(context.Background(), mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = idx.Add(mirror)
	drain(s)
	s.observed(mirror)
	if s.queue.Len() != 1 {
		t.Fatal("a new mirror did not queue its static pod's status")
	}
	drain(s)
	mustSync(t, s, "static-uid")
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web-n", metavOpts)
	if got.UID != "mirror-uid" || got.Status.Phase != v1.PodRunning {
		t.Errorf("mirror %s phase %s", got.UID, got.Status.Phase)
	}
	// A pod of the name that is not its mirror never gets it.
	other := testPod("web-n", "other", "6")
	_ = idx.Update(other)
	s.Set(withPhase(static, v1.PodSucceeded))
	before := statusWrites(client)
	mustSync(t, s, "static-uid")
	if statusWrites(client) != before {
		t.Error("a static pod's status written to a pod not its mirror")
	}
}

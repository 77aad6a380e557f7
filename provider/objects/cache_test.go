package objects

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// objectMaxIdle is MaxIdle at the kubelet's default syncFrequency, a minute.
var objectMaxIdle = MaxIdle(time.Minute)

func newTestCache(t *testing.T, objs ...runtime.Object) (*Cache, *fake.Clientset, *testingclock.FakeClock) {
	t.Helper()
	client := fake.NewClientset(objs...)
	clk := testingclock.NewFakeClock(time.Now())
	return NewCache(t.Context(), client, clk, objectMaxIdle), client, clk
}

func countActions(client *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// watchStarted closes once the cache's watch of resource is registered with
// the fake's tracker: the fake has no resourceVersions, so a change made
// between its List and its Watch would never be delivered.
func watchStarted(client *fake.Clientset, resource string) <-chan struct{} {
	started := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor(resource, func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		once.Do(func() { close(started) })
		return true, w, err
	})
	return started
}

// eventually waits for the watch to deliver what cond looks for; the test's
// own deadline bounds it.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextCancel(t.Context(), 5*time.Millisecond, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestObjectCacheReadsFromOneWatch(t *testing.T) {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "one"}}
	c, client, _ := newTestCache(t, cm)
	for range 10 {
		got, err := c.ConfigMap(t.Context(), "ns", "kube-root-ca.crt")
		if err != nil || got.Data["ca.crt"] != "one" {
			t.Fatalf("ConfigMap = %v, %v", got, err)
		}
	}
	if l, g := countActions(client, "list", "configmaps"), countActions(client, "get", "configmaps"); l != 1 || g != 0 {
		t.Errorf("10 reads made %d lists and %d gets, want 1 list and no get", l, g)
	}
}

func TestObjectCacheSeesUpdatesAndDeletion(t *testing.T) {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"k": []byte("one")}}
	c, client, _ := newTestCache(t, s)
	started := watchStarted(client, "secrets")
	ctx := t.Context()
	if _, err := c.Secret(ctx, "ns", "s"); err != nil {
		t.Fatal(err)
	}
	<-started
	s2 := s.DeepCopy()
	s2.Data["k"] = []byte("two")
	if _, err := client.CoreV1().Secrets("ns").Update(ctx, s2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		got, err := c.Secret(ctx, "ns", "s")
		return err == nil && string(got.Data["k"]) == "two"
	})
	if err := client.CoreV1().Secrets("ns").Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, err := c.Secret(ctx, "ns", "s")
		return apierrors.IsNotFound(err)
	})
	_, err := c.Secret(ctx, "ns", "s")
	if want := `secret "s" not found`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestObjectCacheMissingIsNotFoundFromTheStore(t *testing.T) {
	c, client, _ := newTestCache(t)
	_, err := c.ConfigMap(t.Context(), "ns", "absent")
	if !apierrors.IsNotFound(err) || err.Error() != `configmap "absent" not found` {
		t.Fatalf("err = %v, want configmap not found", err)
	}
	if g := countActions(client, "get", "configmaps"); g != 0 {
		t.Errorf("%d gets, want the answer from the watch's list", g)
	}
}

func TestObjectCacheStopsIdleWatchAndRestartsOnUse(t *testing.T) {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	c, client, clk := newTestCache(t, cm)
	ctx := t.Context()
	if _, err := c.ConfigMap(ctx, "ns", "c"); err != nil {
		t.Fatal(err)
	}
	// Read again before the idle time: the watch stays.
	clk.Step(objectMaxIdle - time.Second)
	if _, err := c.ConfigMap(ctx, "ns", "c"); err != nil {
		t.Fatal(err)
	}
	watching := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.items) == 1
	}
	// The first check, due at objectMaxIdle after the first read, finds it
	// read since and waits for the rest of the idle time.
	clk.Step(2 * time.Second)
	eventually(t, func() bool { return clk.HasWaiters() })
	if !watching() {
		t.Fatalf("watch stopped 2s after its last read")
	}
	clk.Step(objectMaxIdle)
	eventually(t, func() bool { return !watching() })
	if _, err := c.ConfigMap(ctx, "ns", "c"); err != nil {
		t.Fatal(err)
	}
	if l := countActions(client, "list", "configmaps"); l != 2 {
		t.Errorf("%d lists, want a second one after the idle stop", l)
	}
}

func TestObjectCacheListFailureAnswersWithGet(t *testing.T) {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Data: map[string]string{"k": "v"}}
	c, client, _ := newTestCache(t, cm)
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", nil)
	})
	got, err := c.ConfigMap(t.Context(), "ns", "c")
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("ConfigMap = %v, %v; want the object from a GET", got, err)
	}
	if _, err := c.ConfigMap(t.Context(), "ns", "absent"); !apierrors.IsNotFound(err) {
		t.Errorf("err = %v, want NotFound from the GET", err)
	}
}

func TestObjectCacheWaitIsBoundedByContext(t *testing.T) {
	c, client, _ := newTestCache(t)
	// A list that never answers: the read gives up with its context.
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-t.Context().Done()
		return true, nil, context.Canceled
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.ConfigMap(ctx, "ns", "c"); err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// A watch outlives its last read by five resync periods, never under a
// minute, as the kubelet's watch-based managers.
func TestMaxIdle(t *testing.T) {
	for sync, want := range map[time.Duration]time.Duration{time.Minute: 5 * time.Minute, 10 * time.Second: time.Minute, 2 * time.Minute: 10 * time.Minute} {
		if got := MaxIdle(sync); got != want {
			t.Errorf("syncFrequency %v: %v, want %v", sync, got, want)
		}
	}
}

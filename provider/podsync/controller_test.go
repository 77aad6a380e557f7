package podsync

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// recordingPods hands each pod event to a channel.
type recordingPods struct{ synced, removed chan string }

func (r recordingPods) SyncPod(_ context.Context, pod *v1.Pod) error {
	r.synced <- pod.Name
	return nil
}

func (r recordingPods) RemovePod(_ context.Context, pod *v1.Pod) error {
	r.removed <- pod.Name
	return nil
}

// HasSynced is false until Run's handler was given every pod of the
// synced informer, whatever the informer says: a pod removed between the
// informer's sync and Run's start reaches no RemovePod, which is what the
// orphan sweep waits for HasSynced to cover. Once true, a removal reaches
// RemovePod.
func TestHasSyncedAfterRunsHandler(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	client := fake.NewClientset(pod)
	inf := informers.NewSharedInformerFactory(client, 0).Core().V1().Pods().Informer()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}
	c := New(Config{Client: client, Informer: inf})
	if c.HasSynced() {
		t.Fatal("HasSynced before Run")
	}
	pods := recordingPods{synced: make(chan string, 1), removed: make(chan string, 1)}
	go func() { _ = c.Run(ctx, pods, 1) }()
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		t.Fatal("never synced")
	}
	if got := <-pods.synced; got != "p" {
		t.Fatalf("synced %q", got)
	}
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := <-pods.removed; got != "p" {
		t.Fatalf("removed %q", got)
	}
}

package csi

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

type attachResult struct {
	meta map[string]string
	err  error
}

// attachFixture is a Manager whose VolumeAttachment GETs are answered
// from state (each GET reported on gets) and whose Node informer runs on
// the fake client; its clock is fake and never stepped, so a wait can
// only end on a Node change or its ctx.
type attachFixture struct {
	m      *Manager
	client *fake.Clientset
	gets   chan bool // each GET, with whether it said attached
	state  atomic.Value
}

func newAttachFixture(t *testing.T) *attachFixture {
	f := &attachFixture{gets: make(chan bool, 10)}
	f.state.Store(storagev1.VolumeAttachmentStatus{})
	f.client = fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	f.client.PrependReactor("get", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
		st := f.state.Load().(storagev1.VolumeAttachmentStatus)
		f.gets <- st.Attached
		return true, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: AttachmentName("h", "d", "n1")}, Status: st}, nil
	})
	factory := informers.NewSharedInformerFactory(f.client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	factory.Start(t.Context().Done())
	f.m = New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: f.client, Node: inf})
	f.m.clock = clocktesting.NewFakeClock(time.Unix(1000, 0))
	reg, err := f.m.watchNode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The Node's initial Add has been handled: it wakes no wait below.
	if !cache.WaitForCacheSync(t.Context().Done(), reg.HasSynced) {
		t.Fatal("node informer not synced")
	}
	return f
}

func (f *attachFixture) wait(ctx context.Context) <-chan attachResult {
	res := make(chan attachResult, 1)
	go func() {
		meta, err := f.m.waitForAttach(ctx, volume{driver: "d", handle: "h"})
		res <- attachResult{meta, err}
	}()
	return res
}

// updateNode writes the Node's volumesAttached, as the attach/detach
// controller does.
func (f *attachFixture) updateNode(t *testing.T, attached ...v1.UniqueVolumeName) {
	n, err := f.client.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.VolumesAttached = nil
	for _, a := range attached {
		n.Status.VolumesAttached = append(n.Status.VolumesAttached, v1.AttachedVolume{Name: a})
	}
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A volume not attached yet waits: the VolumeAttachment is read again
// when the Node changes (not on a timer: the clock never moves), and the
// wait ends once it says attached, with its metadata.
func TestWaitForAttachWakesOnNodeUpdate(t *testing.T) {
	f := newAttachFixture(t)
	res := f.wait(t.Context())
	if <-f.gets {
		t.Fatal("first GET attached")
	}
	// Another change of the Node: read again, still not attached.
	f.updateNode(t, "kubernetes.io/csi/other^x")
	if <-f.gets {
		t.Fatal("second GET attached")
	}
	f.state.Store(storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}})
	f.updateNode(t, "kubernetes.io/csi/other^x", UniqueName("d", "h"))
	if !<-f.gets {
		t.Fatal("GET after the attach said not attached")
	}
	r := <-res
	if r.err != nil || r.meta["dev"] != "/dev/x" {
		t.Errorf("waitForAttach = %v, %v", r.meta, r.err)
	}
}

// The pod's ctx (a delete) ends the wait with the kubelet's message.
func TestWaitForAttachEndsWithCtx(t *testing.T) {
	f := newAttachFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	res := f.wait(ctx)
	<-f.gets
	cancel()
	r := <-res
	if want := "volume h is not attached for volume attachment " + AttachmentName("h", "d", "n1"); r.err == nil || r.err.Error() != want {
		t.Errorf("waitForAttach after cancel: %v, want %s", r.err, want)
	}
}

// An attach error fails at once, with its message, also one found when
// the Node changes.
func TestWaitForAttachError(t *testing.T) {
	f := newAttachFixture(t)
	res := f.wait(t.Context())
	<-f.gets
	f.state.Store(storagev1.VolumeAttachmentStatus{AttachError: &storagev1.VolumeError{Message: "rpc error: no such disk"}})
	f.updateNode(t)
	<-f.gets
	if r := <-res; r.err == nil || r.err.Error() != "rpc error: no such disk" {
		t.Errorf("waitForAttach = %v", r.err)
	}
}

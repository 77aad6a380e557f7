package csi

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// attachFixture is a Manager whose VolumeAttachment GETs are answered
// from state (each GET reported on gets) and whose Node informer runs on
// the fake client; its clock is fake and moves only when a test steps it,
// so a wait ends on a Node change, its ctx or a step of the clock.
type attachFixture struct {
	m      *Manager
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	gets   chan bool // each GET, with whether it said attached
	state  atomic.Value
	// forbidden: a GET is forbidden, as the Node authorizer answers for
	// a VolumeAttachment not made yet.
	forbidden atomic.Bool
}

func newAttachFixture(t *testing.T) *attachFixture {
	f := &attachFixture{gets: make(chan bool, 10), clock: clocktesting.NewFakeClock(time.Unix(1000, 0))}
	f.state.Store(storagev1.VolumeAttachmentStatus{})
	f.client = fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	f.client.PrependReactor("get", "volumeattachments", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		st := f.state.Load().(storagev1.VolumeAttachmentStatus)
		f.gets <- st.Attached
		if f.forbidden.Load() {
			return true, nil, apierrors.NewForbidden(storagev1.Resource("volumeattachments"), AttachmentName("h", "d", "n1"),
				errors.New("no relationship found between node 'n1' and this object"))
		}
		return true, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: AttachmentName("h", "d", "n1")}, Status: st}, nil
	})
	factory := informers.NewSharedInformerFactory(f.client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	f.m = New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: f.client, Node: inf})
	f.m.clock = f.clock
	reg, err := f.m.watchNode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(t.Context().Done())
	// The Node's initial Add has been handled: it wakes no wait below.
	if !cache.WaitForCacheSync(t.Context().Done(), reg.HasSynced) {
		t.Fatal("node informer not synced")
	}
	return f
}

// await runs awaitAttach of the volume d/h; the channel closes when it
// returns.
func (f *attachFixture) await(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.m.awaitAttach(ctx, volume{driver: "d", handle: "h"})
	}()
	return done
}

// waiting returns once the wait started by await waits (its bound's timer
// set); it fails if the wait ends first.
func (f *attachFixture) waiting(t *testing.T, done <-chan struct{}) {
	t.Helper()
	for !f.clock.HasWaiters() {
		select {
		case <-done:
			t.Fatal("the wait ended at once")
		default:
			runtime.Gosched()
		}
	}
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

// A volume not attached yet is waited for (its VolumeAttachment read once)
// until the Node's volumesAttached lists it, not on a timer (the clock
// never moves); another volume listed does not end the wait.
func TestAwaitAttachEndsWhenTheNodeListsIt(t *testing.T) {
	f := newAttachFixture(t)
	done := f.await(t.Context())
	if <-f.gets {
		t.Fatal("GET said attached")
	}
	f.waiting(t, done)
	f.updateNode(t, "kubernetes.io/csi/other^x")
	f.updateNode(t, "kubernetes.io/csi/other^x", UniqueName("d", "h"))
	<-done
	if len(f.gets) != 0 {
		t.Errorf("%d more GETs of the VolumeAttachment", len(f.gets))
	}
}

// A VolumeAttachment not made yet (forbidden to the node, whose authorizer
// knows none of that name) is waited for as one not attached.
func TestAwaitAttachForbiddenIsNotYet(t *testing.T) {
	f := newAttachFixture(t)
	f.forbidden.Store(true)
	done := f.await(t.Context())
	<-f.gets
	f.waiting(t, done)
	f.updateNode(t, UniqueName("d", "h"))
	<-done
}

// Listed already, the wait reads nothing; a VolumeAttachment attached or
// failed already (a Node cache not filled, the attacher's error) ends it
// at once, for the check under the lock to tell.
func TestAwaitAttachReturnsAtOnce(t *testing.T) {
	f := newAttachFixture(t)
	f.updateNode(t, UniqueName("d", "h"))
	for !f.m.nodeLists(UniqueName("d", "h")) {
		runtime.Gosched()
	}
	<-f.await(t.Context())
	if len(f.gets) != 0 {
		t.Errorf("%d GETs of a volume the Node lists", len(f.gets))
	}
	f = newAttachFixture(t)
	f.state.Store(storagev1.VolumeAttachmentStatus{Attached: true})
	<-f.await(t.Context())
	f.state.Store(storagev1.VolumeAttachmentStatus{AttachError: &storagev1.VolumeError{Message: "no such disk"}})
	<-f.await(t.Context())
}

// The pod's ctx (its deletion) ends the wait; so does the kubelet's bound.
func TestAwaitAttachEndsWithCtxOrBound(t *testing.T) {
	f := newAttachFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := f.await(ctx)
	<-f.gets
	f.waiting(t, done)
	cancel()
	<-done

	done = f.await(t.Context())
	<-f.gets
	f.waiting(t, done)
	f.clock.Step(attachWaitTimeout - time.Second)
	select {
	case <-done:
		t.Fatal("the wait ended before its bound")
	default:
	}
	f.clock.Step(time.Second)
	<-done
}

// attachDriver publishes (no capabilities: no staging) and unpublishes,
// reporting each call.
type attachDriver struct {
	csipb.UnimplementedNodeServer
	calls chan string
}

func (attachDriver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{}, nil
}

func (d attachDriver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	d.calls <- "publish " + req.TargetPath
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d attachDriver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	d.calls <- "unpublish " + req.TargetPath
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// A pod's setup waiting for its volume's attachment holds no lock of the
// volume's: another pod's teardown of the same volume goes on meanwhile
// (held behind the wait, TearDownPod would not return and the test would
// hang). Once the Node lists the volume, the setup checks the
// VolumeAttachment under the lock and publishes.
func TestTearDownNotHeldBehindAttachWait(t *testing.T) {
	f := newAttachFixture(t)
	l := f.m.layout
	drv := attachDriver{calls: make(chan string, 10)}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, drv) }); err != nil {
		t.Fatal(err)
	}
	f.m.drivers["d"] = driver{endpoint: socket}
	f.m.mounted = func(string) (bool, error) { return false, nil }
	// Pod "old" has the volume published; pod "new" is to get it.
	old := types.UID("old")
	if err := writeVolData(VolumeDir(l, old, "pv1"), volData{SpecVolID: "pv1", VolumeHandle: "h", DriverName: "d", VolumeLifecycleMode: lifecyclePers}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "ns", UID: "new"}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	type result struct {
		target string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		target, _, err := f.m.SetUpPV(t.Context(), pod, "data", "data", pv, false)
		res <- result{target, err}
	}()
	if <-f.gets {
		t.Fatal("GET said attached")
	}
	for !f.clock.HasWaiters() {
		select {
		case r := <-res:
			t.Fatalf("setup did not wait: %v", r.err)
		default:
			runtime.Gosched()
		}
	}
	// The setup waits: the volume is in use, and the teardown goes on.
	if got := f.m.VolumesInUse(); len(got) != 1 || got[0] != UniqueName("d", "h") {
		t.Errorf("in use while waiting: %v", got)
	}
	if err := f.m.TearDownPod(t.Context(), old); err != nil {
		t.Fatalf("TearDownPod: %v", err)
	}
	if c := <-drv.calls; c != "unpublish "+TargetPath(l, old, "pv1") {
		t.Errorf("teardown: %s", c)
	}
	select {
	case r := <-res:
		t.Fatalf("setup ended before the attach: %v", r.err)
	default:
	}
	f.state.Store(storagev1.VolumeAttachmentStatus{Attached: true})
	f.updateNode(t, UniqueName("d", "h"))
	r := <-res
	if r.err != nil || r.target != TargetPath(l, pod.UID, "pv1") {
		t.Fatalf("SetUpPV = %q, %v", r.target, r.err)
	}
	if !<-f.gets {
		t.Error("the check under the lock saw no attachment")
	}
	if c := <-drv.calls; c != "publish "+r.target {
		t.Errorf("setup: %s", c)
	}
}

// Not attached at the bound, the setup fails with the kubelet's
// WaitForAttach message, from the check under the lock.
func TestSetUpAfterTheBound(t *testing.T) {
	f := newAttachFixture(t)
	f.m.mounted = func(string) (bool, error) { return false, nil }
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	res := make(chan error, 1)
	go func() {
		_, _, err := f.m.SetUpPV(t.Context(), pod, "data", "data", pv, false)
		res <- err
	}()
	<-f.gets
	for !f.clock.HasWaiters() {
		runtime.Gosched()
	}
	f.clock.Step(attachWaitTimeout)
	var fl *Failure
	if err := <-res; !errors.As(err, &fl) || fl.Op != "MountVolume.WaitForAttach" ||
		fl.Err.Error() != "volume h is not attached for volume attachment "+AttachmentName("h", "d", "n1") {
		t.Errorf("SetUpPV after the bound: %v", err)
	}
	if <-f.gets {
		t.Error("the check under the lock said attached")
	}
}

// Without the attach/detach controller (enableControllerAttachDetach:
// false) an attachable volume fails as the kubelet 1.35's does, whose CSI
// attacher refuses to attach from the kubelet: no VolumeAttachment read
// or made, the volume in use all the same (the kubelet reports a desired
// attachable volume in use). A driver that needs no attach mounts as with
// the controller (here: on to its missing registration).
func TestNoControllerAttachDetach(t *testing.T) {
	client := fake.NewClientset()
	m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: client, NoControllerAttachDetach: true})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	op := func() (string, string) {
		t.Helper()
		_, _, err := m.SetUpPV(t.Context(), pod, "data", "data", pv, false)
		var f *Failure
		if !errors.As(err, &f) {
			t.Fatalf("SetUpPV: %v", err)
		}
		return f.Op, f.Err.Error()
	}
	if o, msg := op(); o != "AttachVolume.Attach" || msg != "attaching volumes from the kubelet is not supported" {
		t.Errorf("attachable: %s %s", o, msg)
	}
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "volumeattachments" {
			t.Errorf("VolumeAttachment %s without the controller", a.GetVerb())
		}
	}
	if got := m.VolumesInUse(); len(got) != 1 || got[0] != "kubernetes.io/csi/d^h" {
		t.Errorf("in use %v", got)
	}

	no := false
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}); err != nil {
		t.Fatal(err)
	}
	m.csiDrivers = storagelisters.NewCSIDriverLister(idx)
	if o, msg := op(); o != "MountVolume.MountDevice" || !strings.Contains(msg, "driver name d not found in the list of registered CSI drivers") {
		t.Errorf("attachRequired false: %s %s", o, msg)
	}
}

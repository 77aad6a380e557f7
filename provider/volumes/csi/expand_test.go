package csi

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// The kubelet's decision for a mounted claim's volume: nothing until the
// PV grows beyond the node's size; then NodeExpandVolume to the claim's
// allocated size once the resizer hands it to the node, the claim marked
// in progress and finished; a claim at the size already only updates the
// node's size (but a ReadWriteMany one is expanded on each node); a
// claim of an old resizer is expanded to the PV's size.
func TestPlanExpansion(t *testing.T) {
	q := resource.MustParse
	claim := func(capacity, allocated string, st v1.ClaimResourceStatus, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolumeClaim {
		c := &v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{AccessModes: modes,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q("2Gi")}}},
			Status: v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: q(capacity)}}}
		if allocated != "" {
			c.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: q(allocated)}
		}
		if st != "" {
			c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: st}
		}
		return c
	}
	pv := func(size string) *v1.PersistentVolume {
		return &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: q(size)}}}
	}
	node := func(size string) volumeSize { return volumeSize{size: q(size)} }
	pending, inProgress := v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress
	for i, c := range []struct {
		st   volumeSize
		pvc  *v1.PersistentVolumeClaim
		pv   *v1.PersistentVolume
		want expandPlan
	}{
		{node("1Gi"), claim("1Gi", "2Gi", pending), pv("1Gi"), expandPlan{}},
		{node("2Gi"), claim("1Gi", "2Gi", pending), pv("2Gi"), expandPlan{}},
		{volumeSize{}, claim("1Gi", "2Gi", pending), pv("2Gi"), expandPlan{}},
		{volumeSize{size: q("1Gi"), inUseErr: true}, claim("1Gi", "2Gi", pending), pv("2Gi"), expandPlan{}},
		{node("1Gi"), claim("1Gi", "2Gi", v1.PersistentVolumeClaimControllerResizeInProgress), pv("2Gi"), expandPlan{newSize: q("2Gi")}},
		{node("1Gi"), claim("1Gi", "2Gi", pending), pv("2Gi"), expandPlan{call: true, newSize: q("2Gi"), markInProgress: true, finish: true}},
		{node("1Gi"), claim("1Gi", "2Gi", inProgress), pv("2Gi"), expandPlan{call: true, newSize: q("2Gi"), markInProgress: true, finish: true}},
		{node("1Gi"), claim("2Gi", "2Gi", ""), pv("2Gi"), expandPlan{newSize: q("2Gi"), resized: true}},
		{node("1Gi"), claim("2Gi", "2Gi", "", v1.ReadWriteMany), pv("2Gi"), expandPlan{call: true, newSize: q("2Gi")}},
		{node("1Gi"), claim("1Gi", "", ""), pv("2Gi"), expandPlan{call: true, newSize: q("2Gi"), finish: true, legacy: true}},
		{node("1Gi"), claim("2Gi", "", ""), pv("2Gi"), expandPlan{call: true, newSize: q("2Gi"), legacy: true}},
		{volumeSize{size: q("1Gi"), finalErr: true}, claim("1Gi", "3Gi", inProgress), pv("3Gi"),
			expandPlan{call: true, newSize: q("3Gi"), markInProgress: true, finish: true, infeasibleOnFailure: true}},
	} {
		got := planExpansion(c.st, c.pvc, c.pv)
		if got.call != c.want.call || got.markInProgress != c.want.markInProgress || got.finish != c.want.finish || got.resized != c.want.resized ||
			got.legacy != c.want.legacy || got.infeasibleOnFailure != c.want.infeasibleOnFailure || (got.call || got.resized) && got.newSize.Cmp(c.want.newSize) != 0 {
			t.Errorf("case %d: %+v, want %+v", i, got, c.want)
		}
	}
	// The kubelet's MergeResizeConditionOnPVC.
	other := v1.PersistentVolumeClaimCondition{Type: "Other", Status: v1.ConditionTrue}
	old := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, Message: "old"}
	resizing := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue}
	add := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, Message: "new"}
	if got := mergeResizeConditions([]v1.PersistentVolumeClaimCondition{other, old, resizing}, nil, false); len(got) != 1 || got[0].Type != "Other" {
		t.Errorf("finished: %+v", got)
	}
	if got := mergeResizeConditions([]v1.PersistentVolumeClaimCondition{other, old, resizing}, []v1.PersistentVolumeClaimCondition{add}, true); len(got) != 3 || got[1].Message != "old" {
		t.Errorf("failed again (same status keeps the old condition): %+v", got)
	}
	if got := mergeResizeConditions([]v1.PersistentVolumeClaimCondition{other}, []v1.PersistentVolumeClaimCondition{add}, true); len(got) != 2 || got[1].Message != "new" {
		t.Errorf("failed: %+v", got)
	}
}

// expander offers EXPAND_VOLUME and records NodeExpandVolume's size,
// failing with fail if set.
type expander struct {
	csipb.UnimplementedNodeServer
	sizes chan int64
	fail  error
}

func (expander) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{Type: &csipb.NodeServiceCapability_Rpc{
		Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_EXPAND_VOLUME}}}}}, nil
}

func (e expander) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	e.sizes <- req.CapacityRange.RequiredBytes
	if e.fail != nil {
		return nil, e.fail
	}
	return &csipb.NodeExpandVolumeResponse{}, nil
}

// expansionSetup is a manager with a published volume pv1 of claim ns/data
// (1Gi), its driver ex, and its expansion worker running; with watched,
// its watch of the claim is established (the fake's watch does not
// replay what changed since the list).
func expansionSetup(t *testing.T, ex expander, client *fake.Clientset, watched bool) (*Manager, *record.FakeRecorder, *v1.PersistentVolume) {
	t.Helper()
	watching := make(chan struct{}, 1)
	client.PrependWatchReactor("persistentvolumeclaims", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		select {
		case watching <- struct{}{}:
		default:
		}
		return true, w, err
	})
	gi := resource.MustParse("1Gi")
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"},
		Spec:   v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: gi}}},
		Status: v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: gi}}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		Capacity:               v1.ResourceList{v1.ResourceStorage: gi},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	for _, o := range []runtime.Object{pvc, pv} {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	events := record.NewFakeRecorder(10)
	m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: client, Events: events})
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, ex) }); err != nil {
		t.Fatal(err)
	}
	m.drivers["d"] = driver{endpoint: socket}
	m.mounted = func(string) (bool, error) { return true, nil }
	no := false
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}})
	m.csiDrivers = storagelisters.NewCSIDriverLister(idx)
	go m.runExpansions(t.Context())
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
	if _, _, err := m.SetUpPV(t.Context(), pod, "vol", "data", pv, false); err != nil {
		t.Fatal(err)
	}
	if watched {
		<-watching
	}
	return m, events, pv
}

// resize is the external-resizer's part, in its order: the claim's
// allocated size (ControllerResizeInProgress), the PV at the new size,
// then NodeResizePending. The PV is never grown while the claim still
// looks like a legacy resizer's (no allocated size): a node that sees that
// expands to the PV's size at once, and a NodeResizePending written after
// it would find nothing left to do (the test stuck so under load).
func resize(t *testing.T, client *fake.Clientset, size string) {
	t.Helper()
	q := resource.MustParse(size)
	setClaim := func(st v1.ClaimResourceStatus) {
		pvc, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), "data", metav1.GetOptions{})
		pvc.Spec.Resources.Requests[v1.ResourceStorage] = q
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: q}
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: st}
		if _, err := client.CoreV1().PersistentVolumeClaims("ns").Update(t.Context(), pvc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setClaim(v1.PersistentVolumeClaimControllerResizeInProgress)
	pv, _ := client.CoreV1().PersistentVolumes().Get(t.Context(), "pv1", metav1.GetOptions{})
	pv.Spec.Capacity[v1.ResourceStorage] = q
	if _, err := client.CoreV1().PersistentVolumes().Update(t.Context(), pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setClaim(v1.PersistentVolumeClaimNodeResizePending)
}

// awaitClaim waits for the claim's watch to say what ok wants.
func awaitClaim(t *testing.T, client *fake.Clientset, ok func(*v1.PersistentVolumeClaim) bool) *v1.PersistentVolumeClaim {
	t.Helper()
	w, err := client.CoreV1().PersistentVolumeClaims("ns").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if c, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), "data", metav1.GetOptions{}); ok(c) {
		return c
	}
	for ev := range w.ResultChan() {
		if c, isClaim := ev.Object.(*v1.PersistentVolumeClaim); isClaim && ok(c) {
			return c
		}
	}
	t.Fatal("watch ended")
	return nil
}

// A published volume's claim is followed: when the resizer hands the
// grown claim to the node, the node calls NodeExpandVolume for the new
// size at once (no resync of the pod), records it in the claim's status
// (capacity, the resize status gone) and tells the pod and the claim
// FileSystemResizeSuccessful.
func TestOnlineExpansionFollowsTheClaim(t *testing.T) {
	client := fake.NewClientset()
	ex := expander{sizes: make(chan int64, 2)}
	_, events, _ := expansionSetup(t, ex, client, true)
	resize(t, client, "2Gi")
	two := resource.MustParse("2Gi")
	if got := <-ex.sizes; got != two.Value() {
		t.Errorf("NodeExpandVolume to %d, want %d", got, two.Value())
	}
	awaitClaim(t, client, func(c *v1.PersistentVolumeClaim) bool {
		capacity := c.Status.Capacity[v1.ResourceStorage]
		return capacity.Cmp(two) == 0 && len(c.Status.AllocatedResourceStatuses) == 0
	})
	for range 2 {
		if e := <-events.Events; e != `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv1" n1` {
			t.Errorf("event %q", e)
		}
	}
	if len(ex.sizes) != 0 {
		t.Errorf("NodeExpandVolume called again")
	}
}

// A claim read from the watch can be older than the PV read after it:
// the resizer's allocated size not in it yet, the PV already grown. The
// node does not take that for a legacy resizer's claim (expanding to the
// PV at once and finishing the claim, which the resizer's
// NodeResizePending would then leave stuck): it reads the claim again and
// waits for NodeResizePending.
func TestExpansionRereadsALaggingClaim(t *testing.T) {
	client := fake.NewClientset()
	ex := expander{sizes: make(chan int64, 2)}
	m, _, _ := expansionSetup(t, ex, client, true)
	key := claimKey{"ns", "data"}
	stale, err := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse("2Gi")
	pvc := stale.DeepCopy()
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = q
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: q}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress}
	if _, err := client.CoreV1().PersistentVolumeClaims("ns").Update(t.Context(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv, _ := client.CoreV1().PersistentVolumes().Get(t.Context(), "pv1", metav1.GetOptions{})
	pv.Spec.Capacity[v1.ResourceStorage] = q
	if _, err := client.CoreV1().PersistentVolumes().Update(t.Context(), pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.exp.mu.Lock()
	u := m.exp.uses[key]["uid1"]
	m.exp.mu.Unlock()
	if err := m.expandUse(t.Context(), key, u, stale); err != nil {
		t.Fatal(err)
	}
	if len(ex.sizes) != 0 {
		t.Fatalf("NodeExpandVolume to %d on the stale claim", <-ex.sizes)
	}
	c, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), "data", metav1.GetOptions{})
	if got := c.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("claim's resize status %q, want it left to the resizer", got)
	}
}

// A driver refusing the size (InvalidArgument, a final error) makes the
// claim's expansion infeasible with a NodeResizeError condition, and the
// pod gets VolumeResizeFailed.
func TestOnlineExpansionInfeasible(t *testing.T) {
	client := fake.NewClientset()
	ex := expander{sizes: make(chan int64, 10), fail: status.Error(codes.InvalidArgument, "too big")}
	_, events, _ := expansionSetup(t, ex, client, true)
	resize(t, client, "2Gi")
	<-ex.sizes
	c := awaitClaim(t, client, func(c *v1.PersistentVolumeClaim) bool {
		return c.Status.AllocatedResourceStatuses[v1.ResourceStorage] == v1.PersistentVolumeClaimNodeResizeInfeasible
	})
	if len(c.Status.Conditions) != 1 || c.Status.Conditions[0].Type != v1.PersistentVolumeClaimNodeResizeError ||
		!strings.Contains(c.Status.Conditions[0].Message, "too big") {
		t.Errorf("conditions %+v", c.Status.Conditions)
	}
	if e := <-events.Events; !strings.HasPrefix(e, `Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume "pv1" : Expander.NodeExpand failed to expand the volume : rpc error: code = InvalidArgument desc = too big`) {
		t.Errorf("event %q", e)
	}
}

// A node not allowed to watch claims (the Node authorizer alone) still
// expands the volume: when the pod's resync sets the volume up again.
func TestOnlineExpansionWithoutWatch(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(v1.Resource("persistentvolumeclaims"), "", nil)
	})
	client.PrependWatchReactor("persistentvolumeclaims", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewForbidden(v1.Resource("persistentvolumeclaims"), "", nil)
	})
	ex := expander{sizes: make(chan int64, 2)}
	m, _, pv := expansionSetup(t, ex, client, false)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
	resize(t, client, "2Gi")
	// The resync sets the volume up again.
	if _, _, err := m.SetUpPV(t.Context(), pod, "vol", "data", pv, false); err != nil {
		t.Fatal(err)
	}
	if got, two := <-ex.sizes, resource.MustParse("2Gi"); got != two.Value() {
		t.Errorf("NodeExpandVolume to %d", got)
	}
}

package main

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// fakeCSI answers ControllerExpandVolume as told and counts the calls.
type fakeCSI struct {
	csipb.ControllerClient
	node  bool
	err   error
	calls []*csipb.ControllerExpandVolumeRequest
}

func (f *fakeCSI) ControllerExpandVolume(_ context.Context, req *csipb.ControllerExpandVolumeRequest, _ ...grpc.CallOption) (*csipb.ControllerExpandVolumeResponse, error) {
	f.calls = append(f.calls, req)
	if f.err != nil {
		return nil, f.err
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: req.CapacityRange.RequiredBytes, NodeExpansionRequired: f.node}, nil
}

func objects(driver, request string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv", Resources: v1.VolumeResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(request)}}},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h"}}}}
	return pvc, pv
}

func newTestResizer(t *testing.T, csi csipb.ControllerClient, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) *resizer {
	t.Helper()
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	vols := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := claims.Add(pvc); err != nil {
		t.Fatal(err)
	}
	if err := vols.Add(pv); err != nil {
		t.Fatal(err)
	}
	return &resizer{client: fake.NewClientset(pvc, pv), csi: csi, driver: "d", pvcs: corelisters.NewPersistentVolumeClaimLister(claims),
		pvs: corelisters.NewPersistentVolumeLister(vols), recorder: record.NewFakeRecorder(10)}
}

func TestSyncNodeExpansionRequired(t *testing.T) {
	pvc, pv := objects("d", "2Gi")
	csi := &fakeCSI{node: true}
	r := newTestResizer(t, csi, pvc, pv)
	if err := r.sync(context.Background(), "ns/c"); err != nil {
		t.Fatal(err)
	}
	if len(csi.calls) != 1 || csi.calls[0].CapacityRange.RequiredBytes != 2<<30 || csi.calls[0].VolumeId != "h" {
		t.Fatalf("calls %v", csi.calls)
	}
	gotPV, _ := r.client.CoreV1().PersistentVolumes().Get(context.Background(), "pv", metav1.GetOptions{})
	if q := gotPV.Spec.Capacity[v1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("PV capacity %s", q.String())
	}
	got, _ := r.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if s := got.Status.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("resize status %q", s)
	}
	if q := got.Status.AllocatedResources[v1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("allocated %s", q.String())
	}
	if q := got.Status.Capacity[v1.ResourceStorage]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("capacity %s before the node's expansion", q.String())
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != v1.PersistentVolumeClaimFileSystemResizePending {
		t.Errorf("conditions %v", got.Status.Conditions)
	}
}

func TestSyncControllerOnly(t *testing.T) {
	pvc, pv := objects("d", "2Gi")
	r := newTestResizer(t, &fakeCSI{}, pvc, pv)
	if err := r.sync(context.Background(), "ns/c"); err != nil {
		t.Fatal(err)
	}
	got, _ := r.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if q := got.Status.Capacity[v1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("capacity %s", q.String())
	}
	if len(got.Status.Conditions) != 0 || len(got.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("left %v %v", got.Status.Conditions, got.Status.AllocatedResourceStatuses)
	}
}

func TestSyncSkips(t *testing.T) {
	for name, f := range map[string]func(*v1.PersistentVolumeClaim, *v1.PersistentVolume){
		"other driver": func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Spec.CSI.Driver = "other" },
		"no growth": func(c *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
			c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("1Gi")
		},
		"node pending": func(c *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
			setAllocated(&c.Status, resource.MustParse("2Gi"), v1.PersistentVolumeClaimNodeResizePending)
		},
		"unbound": func(c *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { c.Status.Phase = v1.ClaimPending },
	} {
		pvc, pv := objects("d", "2Gi")
		f(pvc, pv)
		csi := &fakeCSI{}
		if err := newTestResizer(t, csi, pvc, pv).sync(context.Background(), "ns/c"); err != nil || len(csi.calls) != 0 {
			t.Errorf("%s: err %v, calls %d", name, err, len(csi.calls))
		}
	}
}

func TestSyncFinalError(t *testing.T) {
	pvc, pv := objects("d", "2Gi")
	r := newTestResizer(t, &fakeCSI{err: status.Error(codes.OutOfRange, "too big")}, pvc, pv)
	if err := r.sync(context.Background(), "ns/c"); err == nil {
		t.Fatal("no error to retry")
	}
	got, _ := r.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if s := got.Status.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimControllerResizeInfeasible {
		t.Errorf("resize status %q", s)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != v1.PersistentVolumeClaimControllerResizeError {
		t.Errorf("conditions %v", got.Status.Conditions)
	}
}

// A driver expanding only on the node (the trivial resizer): no controller
// call, the PV at the request and the node left to finish; the node
// failing it as infeasible and the user asking for less, the smaller size
// is handed to the node again (external-resizer's recovery of a node-only
// expansion), but not while the node still works on it.
func TestSyncTrivialAndRecovery(t *testing.T) {
	pvc, pv := objects("d", "9Gi")
	csi := &fakeCSI{}
	r := newTestResizer(t, csi, pvc, pv)
	r.trivial = true
	if err := r.sync(context.Background(), "ns/c"); err != nil {
		t.Fatal(err)
	}
	if len(csi.calls) != 0 {
		t.Fatalf("ControllerExpandVolume calls %v", csi.calls)
	}
	check := func(pvSize, alloc string, st v1.ClaimResourceStatus) *v1.PersistentVolumeClaim {
		t.Helper()
		gotPV, _ := r.client.CoreV1().PersistentVolumes().Get(context.Background(), "pv", metav1.GetOptions{})
		if q := gotPV.Spec.Capacity[v1.ResourceStorage]; q.Cmp(resource.MustParse(pvSize)) != 0 {
			t.Errorf("PV capacity %s, want %s", q.String(), pvSize)
		}
		got, _ := r.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
		if q := got.Status.AllocatedResources[v1.ResourceStorage]; q.Cmp(resource.MustParse(alloc)) != 0 || got.Status.AllocatedResourceStatuses[v1.ResourceStorage] != st {
			t.Errorf("allocated %s %q, want %s %q", q.String(), got.Status.AllocatedResourceStatuses[v1.ResourceStorage], alloc, st)
		}
		return got
	}
	got := check("9Gi", "9Gi", v1.PersistentVolumeClaimNodeResizePending)
	gotPV, _ := r.client.CoreV1().PersistentVolumes().Get(context.Background(), "pv", metav1.GetOptions{})

	// The node fails it (in progress, then infeasible) and the user asks
	// for 5Gi.
	for _, st := range []v1.ClaimResourceStatus{v1.PersistentVolumeClaimNodeResizeInProgress, v1.PersistentVolumeClaimNodeResizeInfeasible} {
		got.Status.AllocatedResourceStatuses[v1.ResourceStorage] = st
		got.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("5Gi")
		r = newTestResizer(t, csi, got, gotPV)
		r.trivial = true
		if err := r.sync(context.Background(), "ns/c"); err != nil {
			t.Fatal(err)
		}
		if st == v1.PersistentVolumeClaimNodeResizeInProgress {
			check("9Gi", "9Gi", st) // the node's to finish or fail
		}
	}
	check("5Gi", "5Gi", v1.PersistentVolumeClaimNodeResizePending)
	if len(csi.calls) != 0 {
		t.Fatalf("ControllerExpandVolume calls %v", csi.calls)
	}
}

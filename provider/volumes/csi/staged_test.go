package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/provider/volumes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// failingStager offers STAGE_UNSTAGE, fails every NodeStageVolume with
// code and records NodeUnstageVolume.
type failingStager struct {
	csipb.UnimplementedNodeServer
	code     codes.Code
	unstaged chan string
}

func (failingStager) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{Type: &csipb.NodeServiceCapability_Rpc{
		Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}}}, nil
}

func (f failingStager) NodeStageVolume(context.Context, *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	return nil, status.Error(f.code, "fake error")
}

func (f failingStager) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	f.unstaged <- req.StagingTargetPath
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// A pod deleted while its volume's NodeStageVolume failed: after an error
// that is not final (the kubelet's uncertain device) TearDownPod calls
// NodeUnstageVolume although the volume was never published; after a
// final one it does not, and the staging directory is gone at once (the
// e2e CSI mock specs "should call NodeUnstage after NodeStage ephemeral
// error" and "should not call NodeUnstage after NodeStage final error").
func TestTearDownAfterFailedStage(t *testing.T) {
	for _, tc := range []struct {
		code    codes.Code
		unstage bool
	}{{codes.DeadlineExceeded, true}, {codes.Unavailable, true}, {codes.InvalidArgument, false}, {codes.Internal, false}} {
		t.Run(tc.code.String(), func(t *testing.T) {
			root := t.TempDir()
			m := New(Config{RootDir: root, NodeName: "n1"})
			l := volumes.NewLayout(root)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			no := false
			if err := idx.Add(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}); err != nil {
				t.Fatal(err)
			}
			m.csiDrivers = storagelisters.NewCSIDriverLister(idx)
			drv := failingStager{code: tc.code, unstaged: make(chan string, 4)}
			socket := filepath.Join(t.TempDir(), "csi.sock")
			if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, drv) }); err != nil {
				t.Fatal(err)
			}
			m.drivers["d"] = driver{endpoint: socket}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
			pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
				PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
			for range 2 { // the pod's retry: the same either way
				if _, _, err := m.SetUpPV(t.Context(), pod, "vol", "claim", pv, false); status.Code(errorsCause(err)) != tc.code {
					t.Fatalf("SetUpPV: %v, want the driver's %v", err, tc.code)
				}
			}
			staging := StagingPath(l, "d", "h")
			if _, err := os.Stat(filepath.Dir(staging)); tc.unstage == os.IsNotExist(err) {
				t.Errorf("after the failed stage, the staging dir: %v (want it kept: %v)", err, tc.unstage)
			}
			if err := m.TearDownPod(t.Context(), pod.UID); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-drv.unstaged:
				if !tc.unstage || got != staging {
					t.Errorf("NodeUnstageVolume(%s); want it: %v", got, tc.unstage)
				}
			default:
				if tc.unstage {
					t.Error("no NodeUnstageVolume after an uncertain stage")
				}
			}
			if _, err := os.Stat(filepath.Dir(staging)); !os.IsNotExist(err) {
				t.Errorf("the staging dir stays after the teardown: %v", err)
			}
			// Once done, never again.
			if err := m.TearDownPod(t.Context(), pod.UID); err != nil {
				t.Fatal(err)
			}
			if len(drv.unstaged) != 0 {
				t.Error("unstaged again at the next teardown")
			}
		})
	}
}

// errorsCause is the innermost error (the driver's status).
func errorsCause(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// A CSIDriver made after the pod saying attachRequired: false takes the
// volume out of volumesInUse at the pod's next try (the node update the
// attach/detach controller waits for to delete the VolumeAttachment the
// first tries made; e2e CSI mock "should bringup pod after deploying
// CSIDriver attach=false").
func TestNotAttachableAnyMoreLeavesVolumesInUse(t *testing.T) {
	changed := 0
	m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: fake.NewClientset(), Changed: func() { changed++ }})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	if _, _, err := m.SetUpPV(t.Context(), pod, "data", "data", pv, false); err == nil {
		t.Fatal("SetUpPV without a VolumeAttachment succeeded")
	}
	if got := m.VolumesInUse(); len(got) != 1 || changed != 1 {
		t.Fatalf("without a CSIDriver: in use %v (changed %d)", got, changed)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	no := false
	if err := idx.Add(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}); err != nil {
		t.Fatal(err)
	}
	m.csiDrivers = storagelisters.NewCSIDriverLister(idx)
	if _, _, err := m.SetUpPV(t.Context(), pod, "data", "data", pv, false); err == nil {
		t.Fatal("SetUpPV with no driver registered succeeded")
	}
	if got := m.VolumesInUse(); len(got) != 0 || changed != 2 {
		t.Errorf("attachRequired false: in use %v (changed %d)", got, changed)
	}
}

// stager offers STAGE_UNSTAGE and records NodeUnstageVolume.
type stager struct {
	csipb.UnimplementedNodeServer
	unstaged chan string
}

func (stager) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return failingStager{}.NodeGetCapabilities(context.Background(), nil)
}

func (s stager) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	s.unstaged <- req.StagingTargetPath
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// A driver registering (also after a restart of hostlet) has its staged
// volumes that no pod publishes unstaged, and only those: a volume a pod's
// directory still names stays staged, another driver's is not its. So are
// its block volumes no pod maps.
func TestUnstageLeftOnRegistration(t *testing.T) {
	root := t.TempDir()
	m := New(Config{RootDir: root, NodeName: "n1"})
	l := volumes.NewLayout(root)
	stage := func(driver, handle string) string {
		staging := StagingPath(l, driver, handle)
		if err := os.MkdirAll(staging, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := writeVolData(filepath.Dir(staging), volData{DriverName: driver, VolumeHandle: handle}); err != nil {
			t.Fatal(err)
		}
		return staging
	}
	left, used, other := stage("d", "left"), stage("d", "used"), stage("e", "other")
	// Block volumes: one no pod maps, one pod uid2 maps, another driver's.
	blockLeft := leftBlockVolume(t, l, "d", "bleft", "pv-bleft")
	blockUsed := leftBlockVolume(t, l, "d", "bused", "pv-bused")
	mkFile(t, filepath.Join(BlockGlobalMapPath(l, "pv-bused"), "uid2"))
	blockOther := leftBlockVolume(t, l, "e", "bother", "pv-bother")
	podVol := VolumeDir(l, "uid1", "pv-used")
	if err := os.MkdirAll(podVol, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := writeVolData(podVol, volData{SpecVolID: "pv-used", DriverName: "d", VolumeHandle: "used"}); err != nil {
		t.Fatal(err)
	}
	drv := stager{unstaged: make(chan string, 4)}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, drv) }); err != nil {
		t.Fatal(err)
	}
	m.drivers["d"] = driver{endpoint: socket}
	m.unstageLeftOf(t.Context(), "d")
	close(drv.unstaged)
	var got []string
	for s := range drv.unstaged {
		got = append(got, s)
	}
	if len(got) != 2 || got[0] != left || got[1] != blockLeft {
		t.Errorf("NodeUnstageVolume calls %v, want only %s and %s", got, left, blockLeft)
	}
	for _, p := range []string{filepath.Dir(left), blockLeft, filepath.Dir(BlockDataDir(l, "pv-bleft"))} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the unused volume's %s stays: %v", p, err)
		}
	}
	for _, s := range []string{used, other, blockUsed, blockOther} {
		if _, err := os.Stat(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

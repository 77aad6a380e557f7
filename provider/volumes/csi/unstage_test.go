package csi

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/provider/volumes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// flakyUnstager fails the first `fail` NodeUnstageVolume calls with
// DeadlineExceeded, sending every call's outcome.
type flakyUnstager struct {
	recorder
	fail     int
	outcomes chan codes.Code
}

func (f *flakyUnstager) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if f.fail > 0 {
		f.fail--
		f.outcomes <- codes.DeadlineExceeded
		return nil, status.Error(codes.DeadlineExceeded, "fake transient error")
	}
	f.outcomes <- codes.OK
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// flakyManager is a Manager on a fake clock whose driver d fails its
// first `fail` NodeUnstageVolume calls.
func flakyManager(t *testing.T, fail int) (*Manager, *clocktesting.FakeClock, volumes.Layout, *flakyUnstager) {
	t.Helper()
	root := t.TempDir()
	m := New(Config{RootDir: root, NodeName: "n1"})
	fc := clocktesting.NewFakeClock(time.Now())
	m.clock = fc
	drv := &flakyUnstager{recorder: recorder{calls: make(chan string, 10)}, fail: fail, outcomes: make(chan codes.Code, 10)}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, drv) }); err != nil {
		t.Fatal(err)
	}
	m.drivers["d"] = driver{endpoint: socket}
	return m, fc, volumes.NewLayout(root), drv
}

// A failing NodeUnstageVolume does not hold the pod's teardown (its
// directory goes, TearDownPod succeeds) but is retried with back-off; the
// volume stays in volumesInUse until it is unstaged. A retry finding the
// volume published by another pod leaves it to that pod.
func TestUnstageRetriedApartFromThePod(t *testing.T) {
	m, fc, l, drv := flakyManager(t, 2)
	staging := StagingPath(l, "d", "h")
	publish := func(uid types.UID) {
		t.Helper()
		if err := writeVolData(filepath.Dir(staging), volData{DriverName: "d", VolumeHandle: "h"}); err != nil {
			t.Fatal(err)
		}
		if err := writeVolData(VolumeDir(l, uid, "pv1"), volData{SpecVolID: "pv1", VolumeHandle: "h", DriverName: "d", VolumeLifecycleMode: lifecyclePers}); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(TargetPath(l, uid, "pv1"), 0o750); err != nil {
			t.Fatal(err)
		}
		m.markInUse(uid, UniqueName("d", "h"))
	}
	// The next retry's timer is set (the fake clock has a waiter).
	awaitTimer := func() {
		t.Helper()
		for !fc.HasWaiters() {
			runtime.Gosched()
		}
	}
	inUse := []v1.UniqueVolumeName{UniqueName("d", "h")}

	publish("a")
	if err := m.TearDownPod(t.Context(), "a"); err != nil {
		t.Fatalf("TearDownPod with a failing unstage: %v", err)
	}
	if got := <-drv.outcomes; got != codes.DeadlineExceeded {
		t.Fatalf("first unstage: %v", got)
	}
	if _, err := os.Stat(VolumeDir(l, "a", "pv1")); !os.IsNotExist(err) {
		t.Errorf("the pod's volume dir stays: %v", err)
	}
	if got := m.VolumesInUse(); !slices.Equal(got, inUse) {
		t.Errorf("volumesInUse while unstaging fails: %v", got)
	}
	awaitTimer()
	fc.Step(unstageBackoffInitial)
	if got := <-drv.outcomes; got != codes.DeadlineExceeded {
		t.Fatalf("first retry: %v", got)
	}
	awaitTimer()
	fc.Step(2 * unstageBackoffInitial)
	if got := <-drv.outcomes; got != codes.OK {
		t.Fatalf("second retry: %v", got)
	}
	for len(m.VolumesInUse()) != 0 || fc.HasWaiters() {
		runtime.Gosched()
	}
	if _, err := os.Stat(filepath.Dir(staging)); !os.IsNotExist(err) {
		t.Errorf("the staging dir stays: %v", err)
	}

	// Failing again, then another pod publishes it before the retry.
	drv.fail = 1
	publish("b")
	if err := m.TearDownPod(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	<-drv.outcomes
	publish("c")
	awaitTimer()
	fc.Step(unstageBackoffInitial)
	for fc.HasWaiters() || func() bool { m.mu.Lock(); defer m.mu.Unlock(); return len(m.unstaging) != 0 }() {
		runtime.Gosched()
	}
	select {
	case got := <-drv.outcomes:
		t.Errorf("unstaged under pod c: %v", got)
	default:
	}
	if err := m.TearDownPod(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if got := <-drv.outcomes; got != codes.OK {
		t.Errorf("pod c's teardown unstage: %v", got)
	}
}

// A block volume's failing NodeUnstageVolume does not hold the pod either:
// the pod is done once its device is unpublished and unmapped, and the
// unstage is retried with back-off until it is gone with its directories.
// Before, the pod's link went before the unstage, so the pod's retry found
// nothing to do and the volume stayed staged for good.
func TestBlockUnstageRetriedApartFromThePod(t *testing.T) {
	m, fc, l, drv := flakyManager(t, 1)
	staging := leftBlockVolume(t, l, "d", "h", "pv1")
	// Mapped by pod a: its link, its (unmounted) global map file, its
	// publish file.
	publish := BlockPublishPath(l, "pv1", "a")
	for _, f := range []string{publish, filepath.Join(BlockGlobalMapPath(l, "pv1"), "a")} {
		mkFile(t, f)
	}
	link := BlockLink(l, "a", "pv1")
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(publish, link); err != nil {
		t.Fatal(err)
	}
	if err := m.TearDownPod(t.Context(), "a"); err != nil {
		t.Fatalf("TearDownPod with a failing unstage: %v", err)
	}
	if got := <-drv.outcomes; got != codes.DeadlineExceeded {
		t.Fatalf("first unstage: %v", got)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("the pod's device link stays: %v", err)
	}
	for !fc.HasWaiters() {
		runtime.Gosched()
	}
	fc.Step(unstageBackoffInitial)
	if got := <-drv.outcomes; got != codes.OK {
		t.Fatalf("retry: %v", got)
	}
	for fc.HasWaiters() || func() bool { m.mu.Lock(); defer m.mu.Unlock(); return len(m.unstaging) != 0 }() {
		runtime.Gosched()
	}
	for _, p := range []string{staging, BlockDataDir(l, "pv1"), filepath.Dir(BlockGlobalMapPath(l, "pv1"))} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s stays: %v", p, err)
		}
	}
}

// leftBlockVolume makes block volume pv of driver's handle staged (its
// vol_data.json and staging dir) and returns its staging path.
func leftBlockVolume(t *testing.T, l volumes.Layout, driver, handle, pv string) string {
	t.Helper()
	if err := writeVolData(BlockDataDir(l, pv), volData{SpecVolID: pv, DriverName: driver, VolumeHandle: handle}); err != nil {
		t.Fatal(err)
	}
	staging := BlockStagingPath(l, pv)
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	return staging
}

func mkFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

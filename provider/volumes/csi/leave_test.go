package csi

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/provider/pluginwatcher"
	"github.com/hostlet/hostlet/provider/volumes"
	"google.golang.org/grpc"
)

// TearDownAll (hostlet leave) unpublishes every pod's volumes and unstages
// them, and also unstages a staged volume no pod publishes any more; a
// volume of a driver not in the registry is an error naming the volume
// and the driver, and its directory stays.
func TestTearDownAll(t *testing.T) {
	root := t.TempDir()
	m := New(Config{RootDir: root})
	l := volumes.NewLayout(root)
	rec := recorder{calls: make(chan string, 10)}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, rec) }); err != nil {
		t.Fatal(err)
	}
	if err := m.UseDriver(pluginwatcher.Plugin{Name: "d", Endpoint: "unix://" + socket, Versions: []string{"1.0.0"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.UseDriver(pluginwatcher.Plugin{Name: "rel", Endpoint: "csi.sock", Versions: []string{"1.0.0"}}); err == nil {
		t.Error("a relative endpoint is taken")
	}
	// h: staged, published by pod a; left: staged, published by no pod
	// (an unstage cut short); gone: published by pod b through a driver
	// that is not registered.
	for _, h := range []string{"h", "left"} {
		if err := writeVolData(filepath.Dir(StagingPath(l, "d", h)), volData{DriverName: "d", VolumeHandle: h}); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeVolData(VolumeDir(l, "a", "pv1"), volData{SpecVolID: "pv1", VolumeHandle: "h", DriverName: "d", VolumeLifecycleMode: lifecyclePers}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(TargetPath(l, "a", "pv1"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := writeVolData(VolumeDir(l, "b", "pv2"), volData{SpecVolID: "pv2", VolumeHandle: "x", DriverName: "gone.example.com", VolumeLifecycleMode: lifecyclePers}); err != nil {
		t.Fatal(err)
	}
	err := m.TearDownAll(t.Context())
	if err == nil || !strings.Contains(err.Error(), `volume "pv2"`) || !strings.Contains(err.Error(), "driver gone.example.com") {
		t.Errorf("TearDownAll: %v", err)
	}
	var got []string
	for len(rec.calls) > 0 {
		got = append(got, <-rec.calls)
	}
	slices.Sort(got)
	want := []string{"unpublish " + TargetPath(l, "a", "pv1"), "unstage " + StagingPath(l, "d", "h"), "unstage " + StagingPath(l, "d", "left")}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	for _, gone := range []string{VolumeDir(l, "a", "pv1"), filepath.Dir(StagingPath(l, "d", "h")), filepath.Dir(StagingPath(l, "d", "left"))} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s stays: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(VolumeDir(l, "b", "pv2"), volDataFile)); err != nil {
		t.Errorf("the volume not torn down lost its data: %v", err)
	}
}

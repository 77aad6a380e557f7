package main

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

func TestCSIManifestImages(t *testing.T) {
	manifest := []byte(`
      containers:
        - name: hostpath
          image: registry.k8s.io/sig-storage/hostpathplugin:v1.17.0
        - name: csi-external-health-monitor-controller
          image: registry.k8s.io/sig-storage/csi-external-health-monitor-controller:v0.16.0
        - name: node-driver-registrar
          image: registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0
        - name: liveness-probe
          image: registry.k8s.io/sig-storage/livenessprobe:v2.17.0
        - name: csi-resizer
          image: registry.k8s.io/sig-storage/csi-resizer:v2.0.0
        - name: other
          image: registry.k8s.io/e2e-test-images/busybox:1.37.0-1
`)
	got := csiManifestImages(manifest)
	want := map[string]imageKind{
		"registry.k8s.io/sig-storage/hostpathplugin:v1.17.0":            kindHostpathPlugin,
		"registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0": kindRegistrar,
		"registry.k8s.io/sig-storage/livenessprobe:v2.17.0":             kindLivenessProbe,
		"registry.k8s.io/sig-storage/csi-resizer:v2.0.0":                kindResizer,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("csiManifestImages = %v, want %v", got, want)
	}
}

func TestCSIHostpathNames(t *testing.T) {
	all := []listedTest{
		{name: "[sig-storage] CSI Volumes [Driver: csi-hostpath] [Testpattern: Dynamic PV (default fs)] volumes should store data"},
		{name: "[sig-storage] CSI Volumes [Driver: csi-hostpath-v0] [Testpattern: Dynamic PV (default fs)] volumes should store data"},
		{name: "[sig-storage] CSI Volumes [Driver: pd.csi.storage.gke.io] volumes should store data"},
		{name: "[sig-node] Pods should be submitted and removed [Conformance]"},
	}
	got := csiHostpathNames(all)
	if len(got) != 1 || got[0] != all[0].name {
		t.Errorf("csiHostpathNames = %q, want only the first", got)
	}
}

func TestCSIMockNames(t *testing.T) {
	all := []listedTest{
		{name: "[sig-storage] CSI Mock volume attach CSI attach test using mock driver should not require VolumeAttach for drivers without attachment"},
		{name: "[sig-storage] CSI Volumes [Driver: csi-hostpath] [Testpattern: Dynamic PV (default fs)] volumes should store data"},
		{name: "[sig-storage] MutableCSINodeAllocatableCount Dynamic Allocatable Count should observe dynamic changes in CSINode allocatable count"},
	}
	got := csiMockNames(all)
	if len(got) != 1 || got[0] != all[0].name {
		t.Errorf("csiMockNames = %q, want only the first", got)
	}
}

func TestSkipNames(t *testing.T) {
	got, err := skipNames([]string{"a [Serial] x", "b", "c [Disruptive]"}, `\[Serial\]|\[Disruptive\]`)
	if err != nil || !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("skipNames = %q, %v", got, err)
	}
	if _, err := skipNames([]string{"a"}, "a"); err == nil {
		t.Error("skipNames leaving none: no error")
	}
}

func TestRemoveOwnDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "kubelet", "root", "pods", "x")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeOwnDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dir, err)
	}
}

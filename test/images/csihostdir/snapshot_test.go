package csihostdir

import (
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// A snapshot copies the volume as it was; a volume made from it, or
// cloned from a volume, starts with that content; made again it is not
// filled again; the snapshot is listed by id and by source, then deleted.
func TestSnapshotRestoreClone(t *testing.T) {
	ctx := t.Context()
	c := controller{d: &Driver{cfg: Config{StateDir: t.TempDir(), NodeID: "n"}}}
	fsCap := []*csipb.VolumeCapability{{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}}}
	if _, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "src", VolumeCapabilities: fsCap}); err != nil {
		t.Fatal(err)
	}
	write := func(vol, data string) {
		if err := os.WriteFile(filepath.Join(VolumeDir(c.d.cfg.StateDir, vol), "f"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(vol string) string {
		b, _ := os.ReadFile(filepath.Join(VolumeDir(c.d.cfg.StateDir, vol), "f"))
		return string(b)
	}
	write("src", "one")
	snap, err := c.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "s1", SourceVolumeId: "src"})
	if err != nil || !snap.Snapshot.ReadyToUse || snap.Snapshot.SourceVolumeId != "src" {
		t.Fatalf("CreateSnapshot: %+v %v", snap, err)
	}
	write("src", "two")
	fromSnap := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "s1"}}}
	resp, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "restored", VolumeCapabilities: fsCap, VolumeContentSource: fromSnap})
	if err != nil || resp.Volume.ContentSource == nil {
		t.Fatalf("CreateVolume from the snapshot: %+v %v", resp, err)
	}
	if got := read("restored"); got != "one" {
		t.Errorf("restored volume: %q, want the snapshot's %q", got, "one")
	}
	write("restored", "changed")
	if _, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "restored", VolumeCapabilities: fsCap, VolumeContentSource: fromSnap}); err != nil {
		t.Fatal(err)
	}
	if got := read("restored"); got != "changed" {
		t.Errorf("made again: %q, want it left as it was", got)
	}
	clone := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: "src"}}}
	if _, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "clone", VolumeCapabilities: fsCap, VolumeContentSource: clone}); err != nil {
		t.Fatal(err)
	}
	if got := read("clone"); got != "two" {
		t.Errorf("clone: %q, want %q", got, "two")
	}
	if _, err := c.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "s1", SourceVolumeId: "clone"}); err == nil {
		t.Errorf("a snapshot's name taken again for another volume: no error")
	}
	for _, req := range []*csipb.ListSnapshotsRequest{{SnapshotId: "s1"}, {SourceVolumeId: "src"}, {}} {
		l, err := c.ListSnapshots(ctx, req)
		if err != nil || len(l.Entries) != 1 || l.Entries[0].Snapshot.SnapshotId != "s1" {
			t.Errorf("ListSnapshots(%v): %+v %v", req, l, err)
		}
	}
	if _, err := c.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: "s1"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{}); len(l.Entries) != 0 {
		t.Errorf("after DeleteSnapshot: %+v", l.Entries)
	}
	if _, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "late", VolumeCapabilities: fsCap, VolumeContentSource: fromSnap}); err == nil {
		t.Errorf("a volume from a deleted snapshot: no error")
	}
	if exists(VolumeDir(c.d.cfg.StateDir, "late")) {
		t.Errorf("the failed volume's directory stays")
	}
}

package csihostdir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Snapshots and clones, what upstream's external-snapshotter (its
// csi-snapshotter sidecar) and external-provisioner's data sources drive,
// done as csi-driver-host-path does them: a snapshot is a copy of the
// volume's directory (or block file) taken at once and ready to use; a
// volume made from a snapshot or from another volume starts as a copy of
// it. Nothing of this is on the node side: it is here so that the
// testsuites that restore and clone volumes run against the node.

// snapshotMeta is what a snapshot is, kept beside its copy.
type snapshotMeta struct {
	Source  string `json:"source"`
	Block   bool   `json:"block,omitempty"`
	Size    int64  `json:"size"`
	Created int64  `json:"created"` // Unix nanoseconds
}

// SnapshotPath is where a snapshot's copy is kept (a directory, or for a
// block volume's a file).
func SnapshotPath(stateDir, id string) string { return filepath.Join(stateDir, "snapshots", id) }

func snapshotMetaFile(stateDir, id string) string {
	return filepath.Join(stateDir, "snapshots", id+".json")
}

func (c controller) readSnapshot(id string) (*snapshotMeta, error) {
	b, err := os.ReadFile(snapshotMetaFile(c.d.cfg.StateDir, id))
	if err != nil {
		return nil, err
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *snapshotMeta) csi(id string) *csipb.Snapshot {
	return &csipb.Snapshot{SnapshotId: id, SourceVolumeId: m.Source, SizeBytes: m.Size, ReadyToUse: true,
		CreationTime: timestamppb.New(time.Unix(0, m.Created))}
}

func (c controller) CreateSnapshot(_ context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	var snap *csipb.Snapshot
	err := func() error {
		if err := checkID(req.Name); err != nil {
			return err
		}
		if err := checkID(req.SourceVolumeId); err != nil {
			return err
		}
		// Made again with the same name is the same snapshot.
		if m, err := c.readSnapshot(req.Name); err == nil {
			if m.Source != req.SourceVolumeId {
				return status.Errorf(codes.AlreadyExists, "snapshot %s is of volume %s", req.Name, m.Source)
			}
			snap = m.csi(req.Name)
			return nil
		}
		src, isBlock, err := c.volumePath(req.SourceVolumeId)
		if err != nil {
			return err
		}
		dst := SnapshotPath(c.d.cfg.StateDir, req.Name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		_ = os.RemoveAll(dst)
		if err := copyVolume(src, dst, isBlock); err != nil {
			return err
		}
		m := snapshotMeta{Source: req.SourceVolumeId, Block: isBlock, Created: time.Now().UnixNano()}
		if isBlock {
			if fi, err := os.Stat(dst); err == nil {
				m.Size = fi.Size()
			}
		}
		b, _ := json.Marshal(m)
		if err := os.WriteFile(snapshotMetaFile(c.d.cfg.StateDir, req.Name), b, 0o644); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		snap = m.csi(req.Name)
		return nil
	}()
	if err := c.d.record(Call{Method: "CreateSnapshot", Volume: req.SourceVolumeId, Target: req.Name}, err); err != nil {
		return nil, err
	}
	return &csipb.CreateSnapshotResponse{Snapshot: snap}, nil
}

func (c controller) DeleteSnapshot(_ context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	err := func() error {
		if err := checkID(req.SnapshotId); err != nil {
			return err
		}
		for _, p := range []string{SnapshotPath(c.d.cfg.StateDir, req.SnapshotId), snapshotMetaFile(c.d.cfg.StateDir, req.SnapshotId)} {
			if err := os.RemoveAll(p); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
		return nil
	}()
	return &csipb.DeleteSnapshotResponse{}, c.d.record(Call{Method: "DeleteSnapshot", Target: req.SnapshotId}, err)
}

func (c controller) ListSnapshots(_ context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	entries, err := os.ReadDir(filepath.Join(c.d.cfg.StateDir, "snapshots"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &csipb.ListSnapshotsResponse{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || (req.SnapshotId != "" && id != req.SnapshotId) {
			continue
		}
		m, err := c.readSnapshot(id)
		if err != nil || (req.SourceVolumeId != "" && m.Source != req.SourceVolumeId) {
			continue
		}
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: m.csi(id)})
	}
	return resp, nil
}

// volumePath is a volume's data: its block file, or its directory.
func (c controller) volumePath(id string) (path string, isBlock bool, err error) {
	if f := BlockFile(c.d.cfg.StateDir, id); exists(f) {
		return f, true, nil
	}
	if dir := VolumeDir(c.d.cfg.StateDir, id); exists(dir) {
		return dir, false, nil
	}
	return "", false, status.Errorf(codes.NotFound, "volume %s not found", id)
}

// populate fills a volume just made from its content source (a snapshot or
// another volume), as the kinds match: a filesystem's files into a
// directory volume, a block file's bytes into a block volume (which grows
// to the size asked for if that is larger).
func (c controller) populate(src *csipb.VolumeContentSource, id string, isBlock bool, size int64) error {
	var from string
	var fromBlock bool
	switch {
	case src.GetSnapshot() != nil:
		sid := src.GetSnapshot().GetSnapshotId()
		if err := checkID(sid); err != nil {
			return err
		}
		m, err := c.readSnapshot(sid)
		if err != nil {
			return status.Errorf(codes.NotFound, "snapshot %s: %v", sid, err)
		}
		from, fromBlock = SnapshotPath(c.d.cfg.StateDir, sid), m.Block
	case src.GetVolume() != nil:
		vid := src.GetVolume().GetVolumeId()
		if err := checkID(vid); err != nil {
			return err
		}
		var err error
		if from, fromBlock, err = c.volumePath(vid); err != nil {
			return err
		}
	default:
		return nil
	}
	if fromBlock != isBlock {
		return status.Errorf(codes.InvalidArgument, "content source is block %v, volume is block %v", fromBlock, isBlock)
	}
	if isBlock {
		dst := BlockFile(c.d.cfg.StateDir, id)
		if err := copyVolume(from, dst, true); err != nil {
			return err
		}
		if fi, err := os.Stat(dst); err == nil && fi.Size() < size {
			return os.Truncate(dst, size)
		}
		return nil
	}
	return copyVolume(from, VolumeDir(c.d.cfg.StateDir, id), false)
}

// copyVolume copies a directory's contents (owners, modes and all, as
// cp -a) or a file.
func copyVolume(src, dst string, file bool) error {
	var cmd *exec.Cmd
	if file {
		cmd = exec.Command("cp", "-a", src, dst)
	} else {
		if err := os.MkdirAll(dst, 0o777); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		cmd = exec.Command("cp", "-a", src+"/.", dst+"/")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("copying %s: %v %s", src, err, out))
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

package csihostdir

import (
	"context"
	"errors"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The controller service (Config.Controller) is what upstream's
// external-provisioner and external-attacher drive: CreateVolume makes a
// volume in the state dir (a directory, or for a block capability a file
// of the capacity asked for, which NodeStage puts a loop device over),
// accessible from this node only (its topology segment); DeleteVolume
// removes it; ControllerPublish and ControllerUnpublish accept this node
// and are recorded, the publish context naming the node;
// ControllerExpandVolume (what external-resizer calls) grows a block
// volume's file and asks for node expansion, as csi-driver-host-path does,
// whose NodeExpandVolume then makes the loop device see the new size.

type controller struct {
	csipb.UnimplementedControllerServer
	d *Driver
}

func (c controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csipb.ControllerServiceCapability_RPC_CLONE_VOLUME} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// block: one of the capabilities asks for a block volume.
func block(caps []*csipb.VolumeCapability) bool {
	for _, c := range caps {
		if c.GetBlock() != nil {
			return true
		}
	}
	return false
}

func (c controller) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	call := Call{Method: "CreateVolume", Volume: req.Name, Bytes: req.GetCapacityRange().GetRequiredBytes(), Context: req.Parameters,
		Block: block(req.VolumeCapabilities)}
	var vol *csipb.Volume
	err := func() error {
		if err := checkID(req.Name); err != nil {
			return err
		}
		if len(req.VolumeCapabilities) == 0 {
			return status.Error(codes.InvalidArgument, "no volume capabilities")
		}
		size := call.Bytes
		// Made again with the same name is the same volume, not filled
		// again from its content source.
		var made bool
		if call.Block {
			if size <= 0 {
				size = DefaultBlockSize
			}
			file := BlockFile(c.d.cfg.StateDir, req.Name)
			if made = !exists(file); made && req.VolumeContentSource == nil {
				if err := makeBlockFile(file, size); err != nil && !errors.Is(err, os.ErrExist) {
					return status.Error(codes.Internal, err.Error())
				}
			}
		} else {
			dir := VolumeDir(c.d.cfg.StateDir, req.Name)
			made = !exists(dir)
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
		if made && req.VolumeContentSource != nil {
			if err := c.populate(req.VolumeContentSource, req.Name, call.Block, size); err != nil {
				_ = os.RemoveAll(BlockFile(c.d.cfg.StateDir, req.Name))
				_ = os.RemoveAll(VolumeDir(c.d.cfg.StateDir, req.Name))
				return err
			}
		}
		vol = &csipb.Volume{VolumeId: req.Name, CapacityBytes: size, ContentSource: req.VolumeContentSource,
			AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{TopologyKey: c.d.cfg.NodeID}}}}
		return nil
	}()
	return &csipb.CreateVolumeResponse{Volume: vol}, c.d.record(call, err)
}

func (c controller) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	err := func() error {
		if err := checkID(req.VolumeId); err != nil {
			return err
		}
		file := BlockFile(c.d.cfg.StateDir, req.VolumeId)
		if err := detachLoops(file); err != nil {
			return err
		}
		for _, p := range []string{file, VolumeDir(c.d.cfg.StateDir, req.VolumeId)} {
			if err := os.RemoveAll(p); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
		return nil
	}()
	return &csipb.DeleteVolumeResponse{}, c.d.record(Call{Method: "DeleteVolume", Volume: req.VolumeId}, err)
}

func (c controller) ControllerPublishVolume(_ context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	var err error
	switch {
	case checkID(req.VolumeId) != nil:
		err = checkID(req.VolumeId)
	case req.NodeId != c.d.cfg.NodeID:
		err = status.Errorf(codes.NotFound, "node %q is not %q", req.NodeId, c.d.cfg.NodeID)
	}
	pc := map[string]string{"node": req.NodeId}
	c.d.record(Call{Method: "ControllerPublishVolume", Volume: req.VolumeId, ReadOnly: req.Readonly, Publish: pc}, err)
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerPublishVolumeResponse{PublishContext: pc}, nil
}

func (c controller) ControllerUnpublishVolume(_ context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	return &csipb.ControllerUnpublishVolumeResponse{}, c.d.record(Call{Method: "ControllerUnpublishVolume", Volume: req.VolumeId}, checkID(req.VolumeId))
}

func (c controller) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if err := checkID(req.VolumeId); err != nil {
		return nil, err
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.VolumeContext, VolumeCapabilities: req.VolumeCapabilities, Parameters: req.Parameters}}, nil
}

func (c controller) ControllerExpandVolume(_ context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	size := req.GetCapacityRange().GetRequiredBytes()
	err := func() error {
		if err := checkID(req.VolumeId); err != nil {
			return err
		}
		file := BlockFile(c.d.cfg.StateDir, req.VolumeId)
		fi, err := os.Stat(file)
		switch {
		case err == nil:
			if fi.Size() < size {
				if err := os.Truncate(file, size); err != nil {
					return status.Error(codes.Internal, err.Error())
				}
			}
		case !errors.Is(err, os.ErrNotExist):
			return status.Error(codes.Internal, err.Error())
		default:
			// A directory volume has no size of its own.
			if _, err := os.Stat(VolumeDir(c.d.cfg.StateDir, req.VolumeId)); err != nil {
				return status.Errorf(codes.NotFound, "volume %s: %v", req.VolumeId, err)
			}
		}
		return nil
	}()
	if err := c.d.record(Call{Method: "ControllerExpandVolume", Volume: req.VolumeId, Bytes: size}, err); err != nil {
		return nil, err
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
}

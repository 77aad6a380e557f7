// Package csihostdir is a small but real CSI driver for hostlet's tests:
// its volumes are directories under a state dir, staged and published by
// bind mounts (block volumes: files with a loop device, block.go), and it
// registers itself with the node through the kubelet's plugin registry (the
// node-driver-registrar's protocol, in-process), so the node's CSI plugin is
// exercised as a cluster's drivers exercise it. Its controller service
// (controller.go) is what upstream's external-provisioner and
// external-attacher, which are served, drive.
// Upstream's csi-driver-host-path and node-driver-registrar cannot be built
// here (their modules are not served), hence this one. Every call it
// answers is appended to <state>/calls.jsonl for the tests to read.
package csihostdir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TopologyKey is the topology segment the driver reports, its node ID.
const TopologyKey = "topology.csi-hostdir.hostlet.test/node"

// Config says what the driver is and where it keeps things.
type Config struct {
	Name   string
	NodeID string
	// StateDir holds the volumes (volumes/<id>, ephemeral/<id>) and
	// calls.jsonl.
	StateDir string
	// Endpoint is the CSI socket; RegistryDir, if set, is the node's
	// plugins_registry, where it registers.
	Endpoint    string
	RegistryDir string
	// Stage offers STAGE_UNSTAGE_VOLUME.
	Stage bool
	// MaxVolumes is NodeGetInfo's max_volumes_per_node (0: none).
	MaxVolumes int64
	// Controller serves the controller service too (controller.go), for
	// the external-provisioner and external-attacher.
	Controller bool
	// Interceptor, if set, wraps every call of the CSI endpoint (not the
	// registration one): the hostpathplugin stand-in logs them there.
	Interceptor grpc.UnaryServerInterceptor
}

// Call is one call the driver answered.
type Call struct {
	Method   string            `json:"method"`
	Volume   string            `json:"volume,omitempty"`
	Target   string            `json:"target,omitempty"`
	Staging  string            `json:"staging,omitempty"`
	ReadOnly bool              `json:"readOnly,omitempty"`
	Context  map[string]string `json:"context,omitempty"`
	// Bytes is NodeExpandVolume's required size.
	Bytes int64 `json:"bytes,omitempty"`
	// Publish is the publish context (from the VolumeAttachment).
	Publish map[string]string `json:"publish,omitempty"`
	// Block: the capability's access type is block.
	Block bool   `json:"block,omitempty"`
	Error string `json:"error,omitempty"`
}

// Driver is a running driver.
type Driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	cfg Config

	mu         sync.Mutex
	registered chan Registration
	// failUnpublish makes NodeUnpublishVolume fail (a test's fault).
	failUnpublish bool
}

// FailUnpublish makes NodeUnpublishVolume fail with Internal (the volume
// stays published) until it is called with false: a teardown that fails
// for as long as a test needs, in the driver run in the test's process.
func (d *Driver) FailUnpublish(fail bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failUnpublish = fail
}

// Registration is the node's answer to the driver's registration.
type Registration struct {
	Registered bool
	Error      string
}

// Start serves the driver until ctx ends; then its sockets are removed
// (the node deregisters it), its volumes stay.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	d := &Driver{cfg: cfg, registered: make(chan Registration, 16)}
	for _, dir := range []string{filepath.Join(cfg.StateDir, "volumes"), filepath.Join(cfg.StateDir, "ephemeral")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	var opts []grpc.ServerOption
	if cfg.Interceptor != nil {
		opts = append(opts, grpc.UnaryInterceptor(cfg.Interceptor))
	}
	if err := serve(ctx, cfg.Endpoint, func(s *grpc.Server) {
		csipb.RegisterIdentityServer(s, d)
		csipb.RegisterNodeServer(s, d)
		if cfg.Controller {
			csipb.RegisterControllerServer(s, controller{d: d})
		}
	}, opts...); err != nil {
		return nil, err
	}
	if cfg.RegistryDir != "" {
		socket := filepath.Join(cfg.RegistryDir, cfg.Name+"-reg.sock")
		if err := serve(ctx, socket, func(s *grpc.Server) { registerapi.RegisterRegistrationServer(s, registrar{d: d}) }); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Registered is the node's answers to the registration.
func (d *Driver) Registered() <-chan Registration { return d.registered }

func serve(ctx context.Context, socket string, register func(*grpc.Server), opts ...grpc.ServerOption) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		return err
	}
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		srv.Stop()
		_ = os.Remove(socket)
	}()
	return nil
}

// registrar is the node-driver-registrar's side of the kubelet's plugin
// registration.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	d *Driver
}

func (r registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.d.cfg.Name, Endpoint: r.d.cfg.Endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	select {
	case r.d.registered <- Registration{Registered: s.PluginRegistered, Error: s.Error}:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Calls reads back the calls a driver with this state dir answered.
func Calls(stateDir string) ([]Call, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Call
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (d *Driver) record(c Call, err error) error {
	if err != nil {
		c.Error = err.Error()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _ := json.Marshal(c)
	f, ferr := os.OpenFile(filepath.Join(d.cfg.StateDir, "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if ferr == nil {
		_, _ = f.Write(append(b, '\n'))
		f.Close()
	}
	return err
}

// VolumeDir is where the driver keeps a persistent volume's data.
func VolumeDir(stateDir, id string) string { return filepath.Join(stateDir, "volumes", id) }

// BlockFile is the file behind a block volume's loop device.
func BlockFile(stateDir, id string) string { return filepath.Join(stateDir, "volumes", id+".img") }

// EphemeralDir is where it keeps an inline ephemeral volume's data.
func EphemeralDir(stateDir, id string) string { return filepath.Join(stateDir, "ephemeral", id) }

func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return status.Errorf(codes.InvalidArgument, "bad volume id %q", id)
	}
	return nil
}

func (d *Driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: "v1"}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	if !d.cfg.Controller {
		return &csipb.GetPluginCapabilitiesResponse{}, nil
	}
	var caps []*csipb.PluginCapability
	for _, t := range []csipb.PluginCapability_Service_Type{csipb.PluginCapability_Service_CONTROLLER_SERVICE,
		csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS} {
		caps = append(caps, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: t}}})
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *Driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.MaxVolumes,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{TopologyKey: d.cfg.NodeID}}}, nil
}

func (d *Driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, c := range []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: c}}})
	}
	if d.cfg.Stage {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *Driver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	c := Call{Method: "NodeStageVolume", Volume: req.VolumeId, Staging: req.StagingTargetPath, Context: req.VolumeContext,
		Publish: req.PublishContext, Block: req.GetVolumeCapability().GetBlock() != nil}
	err := func() error {
		if err := checkID(req.VolumeId); err != nil {
			return err
		}
		if !d.cfg.Stage {
			return status.Error(codes.Unimplemented, "no STAGE_UNSTAGE_VOLUME")
		}
		if c.Block {
			// A block volume is staged by attaching its loop device.
			_, err := d.loopDevice(req.VolumeId, req.VolumeContext)
			return err
		}
		src := VolumeDir(d.cfg.StateDir, req.VolumeId)
		if err := os.MkdirAll(src, 0o777); err != nil {
			return err
		}
		return bindOnce(src, req.StagingTargetPath, false)
	}()
	return &csipb.NodeStageVolumeResponse{}, d.record(c, err)
}

func (d *Driver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	err := unmount(req.StagingTargetPath)
	if err == nil && checkID(req.VolumeId) == nil {
		err = detachLoops(BlockFile(d.cfg.StateDir, req.VolumeId))
	}
	return &csipb.NodeUnstageVolumeResponse{}, d.record(Call{Method: "NodeUnstageVolume", Volume: req.VolumeId, Staging: req.StagingTargetPath}, err)
}

func (d *Driver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	c := Call{Method: "NodePublishVolume", Volume: req.VolumeId, Target: req.TargetPath, Staging: req.StagingTargetPath,
		ReadOnly: req.Readonly, Context: req.VolumeContext, Publish: req.PublishContext, Block: req.GetVolumeCapability().GetBlock() != nil}
	err := func() error {
		if err := checkID(req.VolumeId); err != nil {
			return err
		}
		if c.Block {
			if req.StagingTargetPath == "" && d.cfg.Stage {
				return status.Error(codes.FailedPrecondition, "not staged")
			}
			dev, err := d.loopDevice(req.VolumeId, req.VolumeContext)
			if err != nil {
				return err
			}
			return bindDevice(dev, req.TargetPath)
		}
		src := req.StagingTargetPath
		switch {
		case req.VolumeContext["csi.storage.k8s.io/ephemeral"] == "true":
			src = EphemeralDir(d.cfg.StateDir, req.VolumeId)
		case src == "" && d.cfg.Stage:
			return status.Error(codes.FailedPrecondition, "not staged")
		case src == "":
			src = VolumeDir(d.cfg.StateDir, req.VolumeId)
		}
		if err := os.MkdirAll(src, 0o777); err != nil {
			return err
		}
		return bindOnce(src, req.TargetPath, req.Readonly)
	}()
	return &csipb.NodePublishVolumeResponse{}, d.record(c, err)
}

func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	fail := d.failUnpublish
	d.mu.Unlock()
	if fail {
		err := status.Error(codes.Internal, "injected NodeUnpublishVolume failure")
		return nil, d.record(Call{Method: "NodeUnpublishVolume", Volume: req.VolumeId, Target: req.TargetPath}, err)
	}
	err := unmount(req.TargetPath)
	if err == nil && checkID(req.VolumeId) == nil && !d.cfg.Stage {
		// Without staging, the loop device is the publication's.
		err = detachLoops(BlockFile(d.cfg.StateDir, req.VolumeId))
	}
	if err == nil && checkID(req.VolumeId) == nil && strings.HasPrefix(req.VolumeId, "csi-") {
		// An inline ephemeral volume (its handle is the kubelet's
		// csi-<sha>) goes with its pod.
		err = os.RemoveAll(EphemeralDir(d.cfg.StateDir, req.VolumeId))
	}
	return &csipb.NodeUnpublishVolumeResponse{}, d.record(Call{Method: "NodeUnpublishVolume", Volume: req.VolumeId, Target: req.TargetPath}, err)
}

// NodeGetVolumeStats is the filesystem's figures under the published
// volume (statfs), as csi-driver-host-path reports them.
func (d *Driver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if !mounted(req.VolumePath) {
		return nil, status.Errorf(codes.NotFound, "%s is not published", req.VolumePath)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(req.VolumePath, &st); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// NodeExpandVolume checks the volume is published and records the call;
// a directory has no size of its own, a block volume's loop device is
// told its file grew (ControllerExpandVolume grew it).
func (d *Driver) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	var err error
	if !mounted(req.VolumePath) {
		err = status.Errorf(codes.NotFound, "%s is not published", req.VolumePath)
	} else if err = checkID(req.VolumeId); err == nil {
		err = d.refreshLoop(req.VolumeId)
	}
	c := Call{Method: "NodeExpandVolume", Volume: req.VolumeId, Target: req.VolumePath, Staging: req.StagingTargetPath,
		Bytes: req.GetCapacityRange().GetRequiredBytes()}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: c.Bytes}, d.record(c, err)
}

// bindOnce bind-mounts src on target (made if missing) unless target is
// a mount point already, as CSI calls are idempotent.
func bindOnce(src, target string, readOnly bool) error {
	if mounted(target) {
		return nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, target, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// unmount unmounts target if mounted and removes it, as the spec asks of
// NodeUnpublish and NodeUnstage (a missing target is success).
func unmount(target string) error {
	for mounted(target) {
		if err := unix.Unmount(target, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// mounted: path is a mount point (its device differs from its parent's,
// or it is a bind of a directory of the same filesystem, which only
// mountinfo shows).
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	clean := filepath.Clean(path)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescape(f[4]) == clean {
			return true
		}
	}
	return false
}

func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/moby/sys/mountinfo"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SetUpBlock maps the pod's block PersistentVolume (volumeMode: Block)
// with a csi source, the pod's volume volName of claim, as the kubelet's
// csiBlockMapper and MapBlockVolume: WaitForAttach, NodeStageVolume with a
// block capability to the staging path (SetUpDevice, when the driver
// stages), NodePublishVolume to the pod's publish path (MapPodDevice),
// where the driver puts a device file; that file is bind-mounted on the
// global map path and symlinked from the pod's device map path, which it
// returns (the containers' device). A volume mapped already (also by a
// hostlet before a restart) is left as it is. Its claim is expanded as a
// mounted one's (expansions.go), NodeExpandVolume given the publish path. readOnly is the pod's claim's.
func (m *Manager) SetUpBlock(ctx context.Context, pod *v1.Pod, volName, claim string, pv *v1.PersistentVolume, readOnly bool) (string, error) {
	src := pv.Spec.CSI
	v := volume{podVolume: volName, pvc: claim, specName: pv.Name, driver: src.Driver, handle: src.VolumeHandle,
		readOnly: readOnly, pv: pv, attrs: src.VolumeAttributes, stageSecret: src.NodeStageSecretRef, publishSecret: src.NodePublishSecretRef,
		block: true}
	publish := BlockPublishPath(m.layout, pv.Name, pod.UID)
	link := BlockLink(m.layout, pod.UID, pv.Name)
	mapFile := filepath.Join(BlockGlobalMapPath(m.layout, pv.Name), string(pod.UID))
	fail := func(op string, err error) error { return &Failure{Op: op, Err: err} }

	cd, err := m.csiDriver(v.driver)
	if err != nil {
		return "", fail("MapVolume.SetUpDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.SetupDevice failed to check CSIDriver for %s: %w", v.driver, err))
	}
	if err := lifecycleModeAllowed(v.driver, cd, storagev1.VolumeLifecyclePersistent); err != nil {
		return "", fail("MapVolume.SetUpDevice", err)
	}
	attachable := attachRequired(cd)
	if attachable {
		// In use, then the attachment waited for without the volume's
		// lock, as setUp does.
		m.markInUse(pod.UID, UniqueName(v.driver, v.handle))
		if !m.mapped(link, publish, mapFile) {
			if err := m.kubeletAttach(); err != nil {
				return "", err
			}
			m.awaitAttach(ctx, v)
		}
	}
	defer m.lockVolume(v.driver, v.handle)()
	// Its stats are the driver's NodeGetVolumeStats of the pod's mapping
	// on the global map path, as the kubelet's block mapper's metrics
	// provider asks (NewMetricsCsi of <global map path>/<pod uid>).
	stats := publishedVolume{driver: v.driver, handle: v.handle, target: mapFile, staging: BlockStagingPath(m.layout, pv.Name)}
	if m.mapped(link, publish, mapFile) {
		m.publishedAt(pod.UID, volName, stats)
		// Its claim's expansion, as a mounted volume's (the kubelet
		// expands a mapped device online too).
		m.trackClaim(pod, v, publish)
		return link, nil
	}
	var publishContext map[string]string
	if attachable {
		if publishContext, err = m.waitForAttach(ctx, v); err != nil {
			return "", fail("MapVolume.WaitForAttach", err)
		}
	}
	conn, err := m.conn(v.driver)
	if err != nil {
		return "", fail("MapVolume.SetUpDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.SetUpDevice failed to get CSI client: %w", err))
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := node.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return "", fail("MapVolume.SetUpDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.SetUpDevice failed to get node capabilities: %w", err))
	}
	am := v1.ReadWriteOnce
	if len(pv.Spec.AccessModes) > 0 {
		am = pv.Spec.AccessModes[0]
	}
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(am, hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER))},
	}
	// vol_data.json first, as the kubelet's NewBlockVolumeMapper writes
	// it: the teardown (also a restarted hostlet's) finds the volume by it.
	if err := writeVolData(BlockDataDir(m.layout, pv.Name), volData{SpecVolID: pv.Name, VolumeHandle: v.handle, DriverName: v.driver,
		NodeName: m.cfg.NodeName, AttachmentID: AttachmentName(v.handle, v.driver, m.cfg.NodeName)}); err != nil {
		return "", fail("MapVolume.SetUpDevice", err)
	}
	staging := ""
	if hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		staging = BlockStagingPath(m.layout, pv.Name)
	}
	// Staged once per node, as the kubelet's SetUpDevice runs only while
	// the device is not globally mapped: another pod's mapping says it is.
	if staging != "" && !mappedByOthers(BlockGlobalMapPath(m.layout, pv.Name), pod.UID) {
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return "", fail("MapVolume.SetUpDevice", err)
		}
		secrets, err := m.secret(ctx, v.stageSecret)
		if err != nil {
			return "", fail("MapVolume.SetUpDevice", fmt.Errorf("fetching NodeStageSecretRef %s/%s failed: %v", v.stageSecret.Namespace, v.stageSecret.Name, err))
		}
		if _, err := node.NodeStageVolume(cctx, &csipb.NodeStageVolumeRequest{
			VolumeId: v.handle, PublishContext: publishContext, StagingTargetPath: staging,
			VolumeCapability: capability, VolumeContext: v.attrs, Secrets: secrets,
		}); err != nil {
			return "", fail("MapVolume.SetUpDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.stageVolumeForBlock failed: rpc error: NodeStageVolume: %w", err))
		}
	}
	secrets, err := m.secret(ctx, v.publishSecret)
	if err != nil {
		return "", fail("MapVolume.MapPodDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.publishVolumeForBlock failed to get NodePublishSecretRef %s/%s: %v",
			v.publishSecret.Namespace, v.publishSecret.Name, err))
	}
	attrs := v.attrs
	if podInfoOnMount(cd) {
		attrs = mergeMap(attrs, podInfo(pod, false))
	}
	tokens, inSecrets, err := m.tokenAttrs(ctx, pod, cd)
	if err != nil {
		return "", fail("MapVolume.MapPodDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.publishVolumeForBlock failed to get service account token attributes: %w", err))
	}
	if inSecrets {
		secrets = mergeMap(secrets, tokens)
	} else if tokens != nil {
		attrs = mergeMap(attrs, tokens)
	}
	// The driver makes the publish path itself (a device file); the
	// kubelet makes its directory.
	if err := os.MkdirAll(filepath.Dir(publish), 0o750); err != nil {
		return "", fail("MapVolume.MapPodDevice", err)
	}
	if _, err := node.NodePublishVolume(cctx, &csipb.NodePublishVolumeRequest{
		VolumeId: v.handle, PublishContext: publishContext, StagingTargetPath: staging, TargetPath: publish,
		VolumeCapability: capability, Readonly: readOnly, VolumeContext: attrs, Secrets: secrets,
	}); err != nil {
		return "", fail("MapVolume.MapPodDevice", fmt.Errorf("kubernetes.io/csi: blockMapper.publishVolumeForBlock failed: rpc error: NodePublishVolume: %w", err))
	}
	if _, err := volumes.MapDevice(BlockGlobalMapPath(m.layout, pv.Name), link, publish, pod.UID); err != nil {
		return "", fail("MapVolume.MapBlockVolume", err)
	}
	m.publishedAt(pod.UID, volName, stats)
	// A claim the resizer handed to the node (an offline expansion) is
	// expanded now, as the kubelet's MapVolume does; later ones online.
	m.trackClaim(pod, v, publish)
	return link, nil
}

// mapped says whether the pod's block volume is mapped already: its
// device map path links to its publish path and its global map file is
// mounted.
func (m *Manager) mapped(link, publish, mapFile string) bool {
	if target, err := os.Readlink(link); err != nil || target != publish {
		return false
	}
	ok, err := m.mounted(mapFile)
	return err == nil && ok
}

// mappedByOthers: the global map path has another pod's mapping.
func mappedByOthers(global string, uid types.UID) bool {
	entries, _ := os.ReadDir(global)
	for _, e := range entries {
		if e.Name() != string(uid) {
			return true
		}
	}
	return false
}

// tearDownBlock unmaps the pod's CSI block volumes, found by its device
// map path's symlinks (also a restarted hostlet's), each as the kubelet's
// UnmapVolume and, once no pod maps it, UnmapDevice.
func (m *Manager) tearDownBlock(ctx context.Context, uid types.UID) error {
	dir := m.layout.PodDeviceMapPath(uid, PluginName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := m.unmapBlock(ctx, uid, e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("UnmapVolume.UnmapPodDevice failed for volume %q (pod %q): %w", e.Name(), uid, err))
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(dir)
	}
	return errors.Join(errs...)
}

// unmapBlock undoes SetUpBlock for one pod: the pod's symlink and the
// global map path's bind mount, then NodeUnpublishVolume; the last pod's
// unmap also unstages the volume and removes its directories.
func (m *Manager) unmapBlock(ctx context.Context, uid types.UID, pv string) (err error) {
	link := BlockLink(m.layout, uid, pv)
	global := BlockGlobalMapPath(m.layout, pv)
	mapFile := filepath.Join(global, string(uid))
	publish := BlockPublishPath(m.layout, pv, uid)
	d, err := readVolData(BlockDataDir(m.layout, pv))
	if err != nil {
		// Never published (no vol_data.json yet): nothing of a driver's
		// to undo unless something is mounted.
		for _, p := range []string{mapFile, publish} {
			if ok, merr := mountinfo.Mounted(p); merr == nil && ok {
				return fmt.Errorf("%s mounted, but %w", p, err)
			}
		}
		return removeAll(link, mapFile)
	}
	defer func() { err = namingDriver(err, d) }()
	defer m.lockVolume(d.DriverName, d.VolumeHandle)()
	conn, err := m.conn(d.DriverName)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: blockMapper.UnmapPodDevice failed to get CSI client: %w", err)
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	// The kubelet's UnmapBlockVolume: the bind mount of the device on the
	// global map path, then NodeUnpublishVolume.
	if ok, err := mountinfo.Mounted(mapFile); err == nil && ok {
		if err := unix.Unmount(mapFile, 0); err != nil {
			return fmt.Errorf("failed to unmount linkPath %s: %w", mapFile, err)
		}
	}
	if err := removeAll(mapFile); err != nil {
		return err
	}
	if _, err := node.NodeUnpublishVolume(cctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: d.VolumeHandle, TargetPath: publish}); err != nil {
		return fmt.Errorf("kubernetes.io/csi: blockMapper.unpublishVolumeForBlock failed: rpc error: NodeUnpublishVolume: %w", err)
	}
	if ok, err := mountinfo.Mounted(publish); err == nil && ok {
		return fmt.Errorf("%s is still mounted after NodeUnpublishVolume", publish)
	}
	if err := removeAll(publish, link); err != nil {
		return err
	}
	log.WithFields(log.Fields{"uid": uid, "driver": d.DriverName, "volume": d.VolumeHandle}).Info("csi: block volume unpublished")
	if err := m.unmapDevice(cctx, node, d, pv); err != nil {
		// The pod is done with it once it is unpublished: unstaging is
		// the node's business from now on, retried with back-off as a
		// filesystem volume's (unstage.go), as the kubelet's UnmapDevice
		// is an operation of the node's, not of the pod's.
		d.blockPV = pv
		m.unstageLater(uid, d, err)
	}
	return nil
}

// unmapDevice is the kubelet's UnmapDevice of block volume pv once no pod
// maps or publishes it: NodeUnstageVolume when it was staged, then its
// directories (the kubelet's cleanupOrphanDeviceFiles, with removes that
// never reach through a mount: each is empty by then). Run under the
// volume's lock.
func (m *Manager) unmapDevice(ctx context.Context, node csipb.NodeClient, d volData, pv string) error {
	global := BlockGlobalMapPath(m.layout, pv)
	publishDir := filepath.Dir(BlockPublishPath(m.layout, pv, "uid"))
	for _, dir := range []string{global, publishDir} {
		if rest, err := os.ReadDir(dir); err == nil && len(rest) > 0 {
			return nil
		}
	}
	staging := BlockStagingPath(m.layout, pv)
	if _, err := os.Stat(staging); err == nil {
		if _, err := node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: d.VolumeHandle, StagingTargetPath: staging}); err != nil {
			return fmt.Errorf("kubernetes.io/csi: blockMapper.unstageVolumeForBlock failed: rpc error: NodeUnstageVolume: %w", err)
		}
		if ok, err := mountinfo.Mounted(staging); err == nil && ok {
			return fmt.Errorf("%s is still mounted after NodeUnstageVolume", staging)
		}
		log.WithFields(log.Fields{"driver": d.DriverName, "volume": d.VolumeHandle}).Info("csi: block volume unstaged")
	}
	data := BlockDataDir(m.layout, pv)
	return removeAll(publishDir, staging, filepath.Join(data, volDataFile), data, global, filepath.Dir(global))
}

// unmapDeviceLeft unmaps (unstages) block volume d.blockPV unless it is
// gone already or a pod maps it again: the retry of a failed unstage, and
// the sweep of a driver's registration (unstageLeftOf).
func (m *Manager) unmapDeviceLeft(ctx context.Context, d volData) error {
	defer m.lockVolume(d.DriverName, d.VolumeHandle)()
	if _, err := os.Stat(filepath.Join(BlockDataDir(m.layout, d.blockPV), volDataFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return m.callNode(ctx, d.DriverName, "blockMapper.UnmapDevice", func(ctx context.Context, node csipb.NodeClient) error {
		return m.unmapDevice(ctx, node, d, d.blockPV)
	})
}

// stagedBlockVolumes are the block volumes with a vol_data.json
// (<plugins>/kubernetes.io/csi/volumeDevices/<pv>/data), mapped or not.
func (m *Manager) stagedBlockVolumes() []volData {
	entries, _ := os.ReadDir(blockDir(m.layout))
	var vols []volData
	for _, e := range entries {
		// staging/ and publish/ hold every PV's paths, as the kubelet's.
		if !e.IsDir() || e.Name() == "staging" || e.Name() == "publish" {
			continue
		}
		if d, err := readVolData(BlockDataDir(m.layout, e.Name())); err == nil {
			d.blockPV = e.Name()
			vols = append(vols, d)
		}
	}
	return vols
}

// removeAll removes each path (a file or an empty directory), a missing
// one being no error.
func removeAll(paths ...string) error {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

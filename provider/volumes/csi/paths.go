// Package csi is the kubelet's CSI volume plugin (pkg/volume/csi) on the
// node side: CSI node plugins register through the plugin registry (their
// NodeGetInfo goes into the node's CSINode object and its
// csi.volume.kubernetes.io/nodeid annotation), and pods' CSI volumes —
// PersistentVolumes with a csi source and inline ephemeral ones — are
// staged and published by their drivers to the kubelet's paths, and
// unpublished and unstaged when the pod is done with them. What a volume
// is is read back from the vol_data.json files the kubelet writes, so a
// restarted hostlet tears down what an earlier one set up.
package csi

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"github.com/hostlet/hostlet/provider/volumes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PluginName is the kubelet's qualified name of the CSI volume plugin.
const PluginName = "kubernetes.io/csi"

const (
	volDataFile   = "vol_data.json"
	globalMount   = "globalmount"
	mountDir      = "mount"
	nodeIDKey     = "csi.volume.kubernetes.io/nodeid"
	lifecycleEph  = "Ephemeral"
	lifecyclePers = "Persistent"
)

// volData is what the kubelet keeps next to a published (or staged)
// volume, with its keys, to tear it down without the pod or the PV.
type volData struct {
	SpecVolID           string `json:"specVolID,omitempty"`
	VolumeHandle        string `json:"volumeHandle"`
	DriverName          string `json:"driverName"`
	NodeName            string `json:"nodeName,omitempty"`
	AttachmentID        string `json:"attachmentID,omitempty"`
	VolumeLifecycleMode string `json:"volumeLifecycleMode,omitempty"`

	// blockPV, not in the file, says the volume is the block volume whose
	// vol_data.json is in BlockDataDir(blockPV): it is unstaged at its
	// block staging path (unmapDeviceLeft).
	blockPV string
}

// VolumeDir is a pod's CSI volume's directory, named by the PV (or the
// inline volume): <pod>/volumes/kubernetes.io~csi/<name>; vol_data.json
// is there and the driver publishes to TargetPath below it.
func VolumeDir(l volumes.Layout, uid types.UID, specName string) string {
	return l.PodVolumeDir(uid, PluginName, specName)
}

// TargetPath is where the driver publishes a pod's volume (the kubelet's
// GetCSIMounterPath): <volume dir>/mount.
func TargetPath(l volumes.Layout, uid types.UID, specName string) string {
	return filepath.Join(VolumeDir(l, uid, specName), mountDir)
}

// StagingPath is the kubelet's global mount of a staged volume:
// <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount.
func StagingPath(l volumes.Layout, driver, handle string) string {
	return filepath.Join(l.PluginDir(PluginName), driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), globalMount)
}

// AttachmentName is the VolumeAttachment of a volume on a node, named as
// the attach/detach controller names it: csi-<sha256(handle,driver,node)>.
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// InlineHandle is the volume handle of a pod's inline ephemeral volume:
// csi-<sha256(podUID,volume name)>, as the kubelet makes it.
func InlineHandle(uid types.UID, volName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(uid)+volName)))
}

// UniqueName is how the node status names an attachable CSI volume
// (volumesInUse): kubernetes.io/csi/<driver>^<handle>.
func UniqueName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(PluginName + "/" + driver + "^" + handle)
}

func writeVolData(dir string, d volData) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, volDataFile), b, 0o640)
}

func readVolData(dir string) (volData, error) {
	var d volData
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", filepath.Join(dir, volDataFile), err)
	}
	if d.DriverName == "" || d.VolumeHandle == "" {
		return d, fmt.Errorf("%s: no driver or volume handle", filepath.Join(dir, volDataFile))
	}
	return d, nil
}

// A CSI block volume (volumeMode: Block) has the kubelet's csiBlockMapper
// paths, under the plugin's own directory (not escaped, unlike the other
// plugins' global map paths):
//
//	plugins/kubernetes.io/csi/volumeDevices/<pv>/data/vol_data.json   what the volume is
//	plugins/kubernetes.io/csi/volumeDevices/<pv>/dev/<uid>            the global map path: the published device bind-mounted per pod
//	plugins/kubernetes.io/csi/volumeDevices/staging/<pv>              NodeStageVolume's staging path
//	plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid>        NodePublishVolume's target, a device file the driver makes
//	pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>                   the pod's symlink to the publish path

// blockDir is the plugin's directory of block volumes.
func blockDir(l volumes.Layout) string {
	return filepath.Join(l.PluginDir(PluginName), "volumeDevices")
}

// BlockDataDir holds a block volume's vol_data.json.
func BlockDataDir(l volumes.Layout, pv string) string {
	return filepath.Join(blockDir(l), pv, "data")
}

// BlockGlobalMapPath holds a block volume's per-pod bind mounts.
func BlockGlobalMapPath(l volumes.Layout, pv string) string {
	return filepath.Join(blockDir(l), pv, "dev")
}

// BlockStagingPath is a block volume's NodeStageVolume staging path.
func BlockStagingPath(l volumes.Layout, pv string) string {
	return filepath.Join(blockDir(l), "staging", pv)
}

// BlockPublishPath is a block volume's NodePublishVolume target for pod uid.
func BlockPublishPath(l volumes.Layout, pv string, uid types.UID) string {
	return filepath.Join(blockDir(l), "publish", pv, string(uid))
}

// BlockLink is the pod's symlink to its published block volume, the host
// path of the containers' device.
func BlockLink(l volumes.Layout, uid types.UID, pv string) string {
	return filepath.Join(l.PodDeviceMapPath(uid, PluginName), pv)
}

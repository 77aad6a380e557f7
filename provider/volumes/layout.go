// Package volumes owns what more than one part of the node must agree on
// about pods' volumes: where a pod and its volumes live under --root-dir
// (the kubelet's layout, which DaemonSets mounting /var/lib/kubelet and CSI
// node plugins rely on) and which volumes are local storage, counted as the
// pod's ephemeral storage or reported in its stats.
package volumes

import (
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Layout is the kubelet's directory layout under its root dir:
//
//	<root>/pods/<uid>/                                          a pod's directory
//	<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>   its volumes
//	<root>/pods/<uid>/volume-subpaths/<vol>/<ctr>/<i>           its subPath binds
//	<root>/plugins/<plugin>/...                                 volume plugins' own state
//	<root>/plugins_registry/                                    plugins' registration sockets
//
// The runtime keeps the sandbox's files (etc-hosts, containers/<name>/...
// termination logs) in the pod's directory too; it has no Kubernetes types
// and names that directory itself, the same way.
type Layout struct{ root string }

// NewLayout is the layout under root (--root-dir).
func NewLayout(root string) Layout { return Layout{root: root} }

// PodsDir holds one directory per pod, named by its UID.
func (l Layout) PodsDir() string { return filepath.Join(l.root, "pods") }

// PodDir is the pod's own directory.
func (l Layout) PodDir(uid types.UID) string { return filepath.Join(l.PodsDir(), string(uid)) }

// PodVolumesDir holds the pod's volumes.
func (l Layout) PodVolumesDir(uid types.UID) string { return filepath.Join(l.PodDir(uid), "volumes") }

// PodVolumeDir is where the pod's volume name, of the volume plugin with
// that qualified name, lives on the host: its name escaped as the kubelet
// escapes it ("kubernetes.io/empty-dir": volumes/kubernetes.io~empty-dir).
// For a PersistentVolume name is the PV's, as for the kubelet.
func (l Layout) PodVolumeDir(uid types.UID, plugin, name string) string {
	return filepath.Join(l.PodVolumesDir(uid), strings.ReplaceAll(plugin, "/", "~"), name)
}

// PodSubPathsDir holds the bind mounts of the pod's subPaths.
func (l Layout) PodSubPathsDir(uid types.UID) string {
	return filepath.Join(l.PodDir(uid), "volume-subpaths")
}

// SubPathTarget is where container's volumeMount number idx, of volume
// vol, is bound when it has a subPath, as the kubelet names it (volume and
// container names are DNS labels, so the path is unambiguous).
func (l Layout) SubPathTarget(uid types.UID, vol, container string, idx int) string {
	return filepath.Join(l.PodSubPathsDir(uid), vol, container, strconv.Itoa(idx))
}

// PluginDir is a volume plugin's directory, by its qualified name as the
// kubelet names it ("kubernetes.io/csi": plugins/kubernetes.io/csi).
func (l Layout) PluginDir(plugin string) string {
	return filepath.Join(l.root, "plugins", plugin)
}

// PluginsRegistryDir is where plugins (CSI and DRA drivers) put their
// registration sockets.
func (l Layout) PluginsRegistryDir() string { return filepath.Join(l.root, "plugins_registry") }

// Block volumes (volumeMode: Block, used through volumeDevices) are mapped
// as the kubelet maps them, two ways per pod:
//
//	<root>/plugins/kubernetes.io~<plugin>/volumeDevices/<pv>/<uid>   the device bind-mounted on a file (the global map path)
//	<root>/pods/<uid>/volumeDevices/kubernetes.io~<plugin>/<pv>      a symlink to the device (the pod device map path)
//
// The container's device is the symlink's target; the bind mount is what
// tells a restarted node (and anyone reading the host) which pods use it.
const volumeDevicesDir = "volumeDevices"

// GlobalMapPath is the directory holding a block PV's per-pod bind mounts
// of its device, of the volume plugin with that qualified name (escaped as
// the kubelet's GetVolumeDevicePluginDir has it).
func (l Layout) GlobalMapPath(plugin, pv string) string {
	return filepath.Join(l.root, "plugins", strings.ReplaceAll(plugin, "/", "~"), volumeDevicesDir, pv)
}

// PodVolumeDevicesDir holds the pod's block volumes' symlinks, one
// directory per volume plugin.
func (l Layout) PodVolumeDevicesDir(uid types.UID) string {
	return filepath.Join(l.PodDir(uid), volumeDevicesDir)
}

// PodDeviceMapPath is the directory of the pod's symlinks to the devices
// of the volume plugin with that qualified name; each is named by its PV.
func (l Layout) PodDeviceMapPath(uid types.UID, plugin string) string {
	return filepath.Join(l.PodVolumeDevicesDir(uid), strings.ReplaceAll(plugin, "/", "~"))
}

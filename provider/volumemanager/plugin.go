package volumemanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/hostlet/hostlet/provider/volumes"
	v1 "k8s.io/api/core/v1"
)

// errNotSupported is a volume no plugin of hostlet's serves (or one a
// plugin knows but hostlet does not set up, gitRepo).
var errNotSupported = errors.New("volume type not supported by hostlet")

// Spec is one volume of a pod as a plugin sees it, the kubelet's
// volume.Spec: the pod's volume and, for a claim (a
// PersistentVolumeClaim or a generic ephemeral volume), its resolved
// PersistentVolume, whose source is the plugin's.
type Spec struct {
	Volume *v1.Volume
	Claim  *volumes.Claim
	// First: no other pod has the claim's PV set up on this node (set for
	// claims only, as the claim was marked set up for this pod).
	First bool
}

// PV is the claim's PersistentVolume, nil for an inline volume.
func (s *Spec) PV() *v1.PersistentVolume {
	if s.Claim == nil {
		return nil
	}
	return s.Claim.PV
}

// Name is what the kubelet's messages name the volume by: the PV's name
// for a claim, the pod's volume name otherwise.
func (s *Spec) Name() string {
	if pv := s.PV(); pv != nil {
		return pv.Name
	}
	return s.Volume.Name
}

// plugin is one volume type, as one of the kubelet's volume plugins: a
// new type is a file with one of these and its line in plugins.
type plugin interface {
	// Name is the kubelet's qualified plugin name ("kubernetes.io/nfs"):
	// the directory of its volumes under a pod's.
	Name() string
	// CanSupport: the inline volume, or the claim's PV, is this plugin's.
	CanSupport(s *Spec) bool
	// SetUp makes the volume ready for the pod's containers; called again
	// for a volume set up already (after a restart of hostlet too), it
	// does nothing more, or refreshes what the volume shows. A claim's
	// errors are already the kubelet's (they name the PV); an inline
	// volume's are wrapped in its MountVolume.SetUp message.
	SetUp(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec, content ContentFunc) error
	// Path is the host path containers' mounts of the volume bind, and
	// whether the volume's source makes them read-only.
	Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool)
	// LocalEphemeral: the volume's data counts as the pod's ephemeral
	// storage (the kubelet's IsLocalEphemeralVolume).
	LocalEphemeral(v *v1.Volume) bool
	// HasStats: the stats summary reports the volume (the kubelet reports
	// the volumes it made on the node's disk or memory, not host paths,
	// remote ones or images, whose layers are the image filesystem's).
	HasStats() bool
}

// statFSPlugin is a plugin whose volumes' stats are their filesystem's,
// as the kubelet's MetricsStatFS (NFS, iSCSI, local PVs): not walked, a
// remote or device filesystem says its own use.
type statFSPlugin interface {
	plugin
	statFS()
}

// blockPlugin is a plugin that maps block PVs (volumeMode: Block) for
// volumeDevices, as the kubelet's BlockVolumePlugin.
type blockPlugin interface {
	plugin
	// MapDevice makes the pod's link to the PV's device; its errors are
	// the kubelet's.
	MapDevice(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec) error
}

// mountChecker is a plugin that checks a PV before it is set up, as the
// kubelet's NewMounter and mount option checks do: its errors are the
// kubelet's.
type mountChecker interface {
	CheckMount(s *Spec) error
}

// plugins are hostlet's volume plugins, in the order they are asked.
var plugins = []plugin{
	emptyDir{},
	hostPath{},
	configMapPlugin, secretPlugin, downwardAPIPlugin, projectedPlugin,
	local{},
	nfs{},
	iscsi{},
	csiPlugin{},
	migrated{},
	image{},
	gitRepo{},
}

// findPlugin is the plugin of the volume, nil when hostlet has none.
func findPlugin(s *Spec) plugin {
	for _, p := range plugins {
		if p.CanSupport(s) {
			return p
		}
	}
	return nil
}

// inline is the plugin of an inline volume, nil for a claim or a volume
// hostlet has no plugin for.
func inline(v *v1.Volume) plugin { return findPlugin(&Spec{Volume: v}) }

// IsLocalEphemeral is the kubelet's IsLocalEphemeralVolume: the volumes on
// the node's disk that count as the pod's ephemeral storage (memory-backed
// emptyDirs do not).
func IsLocalEphemeral(v v1.Volume) bool {
	p := inline(&v)
	return p != nil && p.LocalEphemeral(&v)
}

// HasStats: the kubelet reports the volumes it made on the node's disk or
// memory in the stats summary.
func HasStats(v v1.Volume) bool {
	p := inline(&v)
	return p != nil && p.HasStats()
}

// PluginName is the qualified name of the kubelet's volume plugin for an
// inline volume source (its directory in the pod's volumes), "" for a
// claim, whose plugin is its PersistentVolume's.
func PluginName(src *v1.VolumeSource) string {
	if p := inline(&v1.Volume{VolumeSource: *src}); p != nil {
		return p.Name()
	}
	return ""
}

// PVPluginName is the qualified name of the plugin of a PersistentVolume's
// source, "" for one hostlet has none for.
func PVPluginName(pv *v1.PersistentVolume) string {
	if p := findPlugin(&Spec{Volume: &v1.Volume{}, Claim: &volumes.Claim{PV: pv}}); p != nil {
		return p.Name()
	}
	return ""
}

// Dirs finds pods' volume directories on the host: the stats summary and
// the eviction manager measure them.
type Dirs struct{ volumes.Layout }

// NewDirs is the volume directories under the root dir.
func NewDirs(root string) Dirs { return Dirs{volumes.NewLayout(root)} }

// VolumeDir is where the pod's inline volume name lives on the host: under
// its plugin's directory of the pod's volumes. A pod set up by a hostlet
// from before the kubelet's layout has it at volumes/<name>, where it stays
// until the pod is gone: a running pod's containers have that directory
// mounted. (A volume name is a DNS label, never a plugin's directory,
// which has a "~".)
func (d Dirs) VolumeDir(pod *v1.Pod, name string) string {
	old := filepath.Join(d.PodVolumesDir(pod.UID), name)
	if _, err := os.Lstat(old); err == nil {
		return old
	}
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Name == name {
			return d.PodVolumeDir(pod.UID, PluginName(&v.VolumeSource), name)
		}
	}
	return old
}

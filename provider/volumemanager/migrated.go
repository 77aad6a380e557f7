package volumemanager

import (
	"context"
	"fmt"

	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	csitrans "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"
)

// CSI migration, as the kubelet's (pkg/volume/csimigration): the in-tree
// cloud plugins (AWS EBS, GCE PD, Azure Disk and File, Cinder, vSphere,
// Portworx) have no code on a node any more; their volumes are served by
// the cloud's CSI driver under its migrated name (ebs.csi.aws.com,
// pd.csi.storage.gke.io...), as csi-translation-lib translates them. Every
// one of them is migrated in 1.35 (CSIMigrationPortworx is GA), so the
// node says so on its CSINode (csi.MigratedPlugins) and translates each
// such volume before anything else looks at it: a claim's PV when it is
// resolved, as the kubelet's populator does, so its node affinity, access
// modes and RWOP checks, the CSI plugin's paths and the volumesInUse name
// are the translated PV's; an inline source by the migrated plugin below.

var translator = csitrans.New()

// migrateClaim is the claim with its PV translated to CSI when the PV is
// an in-tree one that is migrated; other claims are returned as they are.
func migrateClaim(c *volumes.Claim) (*volumes.Claim, error) {
	if c == nil || c.PV == nil || !translator.IsPVMigratable(c.PV) {
		return c, nil
	}
	pv, err := translator.TranslateInTreePVToCSI(klog.Background(), c.PV)
	if err != nil {
		return nil, fmt.Errorf("failed to translate in-tree pv to CSI: %v", err)
	}
	log.WithFields(log.Fields{"pv": c.PV.Name, "driver": pv.Spec.CSI.Driver}).Debug("volume: in-tree PersistentVolume migrated to its CSI driver")
	out := *c
	out.PV = pv
	return &out, nil
}

// migrated is an inline in-tree cloud volume (a pod's
// awsElasticBlockStore, gcePersistentDisk...), which the kubelet translates
// into a PersistentVolume of the migrated CSI driver and publishes through
// the CSI plugin, named as the translated PV (the driver and the disk):
// its directory is the CSI plugin's.
type migrated struct{}

func (migrated) Name() string { return csi.PluginName }

func (migrated) CanSupport(s *Spec) bool {
	return s.Claim == nil && translator.IsInlineMigratable(s.Volume)
}

// translate is the inline volume as the CSI PersistentVolume the kubelet
// publishes.
func (migrated) translate(pod *v1.Pod, vol *v1.Volume) (*v1.PersistentVolume, error) {
	pv, err := translator.TranslateInTreeInlineVolumeToCSI(klog.Background(), vol, pod.Namespace)
	if err != nil {
		return nil, fmt.Errorf("failed to translate in-tree pv to CSI: %v", err)
	}
	return pv, nil
}

// SetUp publishes the translated volume through its driver with the CSI
// plugin's fsGroup rules. Not read-only, as the kubelet's: an inline
// volume's spec.ReadOnly is false, and the source's readOnly is the
// translated PV's csi.readOnly, which is for the attacher (ControllerPublish)
// only.
func (p migrated) SetUp(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec, _ ContentFunc) error {
	if m.cfg.CSI == nil {
		return csiFailure(s.Volume.Name, errNotSupported)
	}
	pv, err := p.translate(pod, s.Volume)
	if err != nil {
		return csiFailure(s.Volume.Name, err)
	}
	target, fsGroup, err := m.cfg.CSI.SetUpPV(ctx, pod, s.Volume.Name, "", pv, false)
	if err != nil {
		return csiFailure(pv.Name, err)
	}
	if fsGroup {
		if err := applyFSGroupPolicy(target, pod, false); err != nil {
			return csiFailure(pv.Name, err)
		}
	}
	return nil
}

// Path is where the driver published the translated volume.
func (p migrated) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	pv, err := p.translate(pod, s.Volume)
	if err != nil {
		// SetUp failed with this error already: nothing is mounted.
		return csi.TargetPath(m.layout, pod.UID, s.Volume.Name), false
	}
	return csi.TargetPath(m.layout, pod.UID, pv.Name), false
}

func (migrated) LocalEphemeral(*v1.Volume) bool { return false }
func (migrated) HasStats() bool                 { return false }

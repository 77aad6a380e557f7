package volumemanager

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// CSI is the node's CSI plugin (provider/volumes/csi.Manager): it
// publishes pods' CSI volumes through their drivers and unpublishes them.
type CSI interface {
	SetUpPV(ctx context.Context, pod *v1.Pod, volName, claim string, pv *v1.PersistentVolume, readOnly bool) (string, bool, error)
	SetUpInline(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, bool, error)
	SetUpBlock(ctx context.Context, pod *v1.Pod, volName, claim string, pv *v1.PersistentVolume, readOnly bool) (string, error)
	TearDownPod(ctx context.Context, uid types.UID) error
}

// csiPlugin is the kubelet's CSI plugin (kubernetes.io/csi) for CSI PVs
// and inline ephemeral CSI volumes: the node's CSI manager has the driver
// stage and publish them at the kubelet's paths (and map block PVs), and
// tears them down before the pod's directory goes.
type csiPlugin struct{}

func (csiPlugin) Name() string { return csi.PluginName }

func (csiPlugin) CanSupport(s *Spec) bool {
	if pv := s.PV(); pv != nil {
		return pv.Spec.CSI != nil
	}
	return s.Volume.CSI != nil
}

// SetUp publishes the volume and applies the pod's fsGroup to it when the
// kubelet would (the driver's fsGroupPolicy).
func (csiPlugin) SetUp(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec, _ ContentFunc) error {
	name := s.Name()
	if m.cfg.CSI == nil {
		return csiFailure(name, errNotSupported)
	}
	var target string
	var fsGroup bool
	var err error
	if pv := s.PV(); pv != nil {
		target, fsGroup, err = m.cfg.CSI.SetUpPV(ctx, pod, s.Volume.Name, s.Claim.PVC.Name, pv, s.Claim.ReadOnly)
	} else {
		target, fsGroup, err = m.cfg.CSI.SetUpInline(ctx, pod, s.Volume)
	}
	if err != nil {
		return csiFailure(name, err)
	}
	if fsGroup {
		if err := applyFSGroupPolicy(target, pod, false); err != nil {
			return csiFailure(name, err)
		}
	}
	return nil
}

// Path is where the driver published it, read-only if an inline source
// says so.
func (csiPlugin) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	if pv := s.PV(); pv != nil {
		return csi.TargetPath(m.layout, pod.UID, pv.Name), false
	}
	ro := s.Volume.CSI.ReadOnly != nil && *s.Volume.CSI.ReadOnly
	return csi.TargetPath(m.layout, pod.UID, s.Volume.Name), ro
}

// MapDevice maps a CSI block PV through its driver; its errors are the
// kubelet's FailedMapVolume events.
func (csiPlugin) MapDevice(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec) error {
	var err error
	if m.cfg.CSI == nil {
		err = &csi.Failure{Op: "MapVolume.SetUpDevice", Err: errNotSupported}
	} else {
		_, err = m.cfg.CSI.SetUpBlock(ctx, pod, s.Volume.Name, s.Claim.PVC.Name, s.PV(), s.Claim.ReadOnly)
	}
	if err == nil {
		return nil
	}
	f := csiFailure(s.PV().Name, err).(*lifecycle.Failure)
	f.Reason = "FailedMapVolume"
	return f
}

func (csiPlugin) LocalEphemeral(*v1.Volume) bool { return false }
func (csiPlugin) HasStats() bool                 { return false }

// csiFailure is a CSI volume's error as the kubelet's FailedMount (or
// FailedAttachVolume) event says it: the operation, the volume (the PV's
// name, or the inline volume's) and the reason.
func csiFailure(name string, err error) error {
	if f := (*csi.Failure)(nil); errors.As(err, &f) {
		reason := "FailedMount"
		if f.Op == "AttachVolume.Attach" {
			// The kubelet's reason for an attach it cannot make.
			reason = "FailedAttachVolume"
		}
		return &lifecycle.Failure{Reason: reason, Message: fmt.Sprintf("%s failed for volume %q : %v", f.Op, name, f.Err)}
	}
	return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", name, err)}
}

// tearDownCSI has the drivers unpublish (and unstage) the pod's CSI
// volumes before its directory goes, its subPath binds of them first, as
// the kubelet unmounts subPaths before their volume. An error leaves the
// pod's volumes in place: nothing is removed under a driver's mount.
func (m *Manager) tearDownCSI(ctx context.Context, uid types.UID) error {
	if m.cfg.CSI == nil {
		return nil
	}
	if _, err := removeUnmounted(m.layout.PodSubPathsDir(uid)); err != nil {
		return err
	}
	return m.cfg.CSI.TearDownPod(ctx, uid)
}

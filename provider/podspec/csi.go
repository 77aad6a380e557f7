package podspec

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

// csiFailure is a CSI volume's error as the kubelet's FailedMount event
// says it: the operation, the volume (the PV's name, or the inline
// volume's) and the reason.
func csiFailure(name string, err error) error {
	if f := (*csi.Failure)(nil); errors.As(err, &f) {
		return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf("%s failed for volume %q : %v", f.Op, name, f.Err)}
	}
	return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", name, err)}
}

// setUpCSI publishes a pod's CSI volume (inline when pv is nil) and
// applies the pod's fsGroup to it when the kubelet would (the driver's
// fsGroupPolicy).
func (r *Runtime) setUpCSI(ctx context.Context, pod *v1.Pod, vol *v1.Volume, claim string, pv *v1.PersistentVolume, readOnly bool) error {
	name := vol.Name
	if pv != nil {
		name = pv.Name
	}
	if r.cfg.CSI == nil {
		return csiFailure(name, errors.New("volume type not supported by hostlet"))
	}
	var target string
	var fsGroup bool
	var err error
	if pv != nil {
		target, fsGroup, err = r.cfg.CSI.SetUpPV(ctx, pod, vol.Name, claim, pv, readOnly)
	} else {
		target, fsGroup, err = r.cfg.CSI.SetUpInline(ctx, pod, vol)
	}
	if err != nil {
		return csiFailure(name, err)
	}
	if fsGroup {
		if err := applyFSGroup(target, podFSGroup(pod), false); err != nil {
			return csiFailure(name, err)
		}
	}
	return nil
}

// mapCSI maps a pod's CSI block PV through its driver; its errors are the
// kubelet's FailedMapVolume events.
func (r *Runtime) mapCSI(ctx context.Context, pod *v1.Pod, volName string, c *podClaim) error {
	var err error
	if r.cfg.CSI == nil {
		err = &csi.Failure{Op: "MapVolume.SetUpDevice", Err: errors.New("volume type not supported by hostlet")}
	} else {
		_, err = r.cfg.CSI.SetUpBlock(ctx, pod, volName, c.PVC.Name, c.PV, c.ReadOnly)
	}
	if err == nil {
		return nil
	}
	f := csiFailure(c.PV.Name, err).(*lifecycle.Failure)
	f.Reason = "FailedMapVolume"
	return f
}

// tearDownCSI has the drivers unpublish (and unstage) the pod's CSI
// volumes before its directory goes, its subPath binds of them first, as
// the kubelet unmounts subPaths before their volume. An error leaves the
// pod's volumes in place: nothing is removed under a driver's mount.
func (r *Runtime) tearDownCSI(ctx context.Context, uid types.UID) error {
	if r.cfg.CSI == nil {
		return nil
	}
	if _, err := removeUnmounted(r.layout().PodSubPathsDir(uid)); err != nil {
		return err
	}
	return r.cfg.CSI.TearDownPod(ctx, uid)
}

// removePodDir removes a pod's directory once its CSI volumes are torn
// down, never before.
func (r *Runtime) removePodDir(ctx context.Context, uid string) error {
	if err := r.tearDownCSI(ctx, types.UID(uid)); err != nil {
		return fmt.Errorf("csi volumes not torn down; the pod's directory stays: %w", err)
	}
	if _, err := r.layout().TearDownBlock(types.UID(uid)); err != nil {
		return fmt.Errorf("block volumes not unmapped; the pod's directory stays: %w", err)
	}
	return r.teardownVolumes(uid)
}

package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's online expansion of a mounted claim's volume
// (pkg/volume/util/operationexecutor: GenerateExpandInUseVolumeFunc,
// NodeExpander.expandOnPlugin; pkg/volume/csi/expander.go): the node keeps
// the size it last knew the volume at (the actual state of world's
// persistentVolumeSize, first the claim's status.capacity); a PV capacity
// beyond it asks the driver's NodeExpandVolume once the resizer hands the
// claim to the node (NodeResizePending), and the claim's status then says
// the new capacity. When it runs is expansions.go's business.

// nodeExpansionNotRequired on a ReadWriteMany claim says its other nodes
// need not expand it (the kubelet's volumetypes.NodeExpansionNotRequired).
const nodeExpansionNotRequired = "volume.kubernetes.io/node-expansion-not-required"

// volumeSize is the node's view of a mounted volume's size.
type volumeSize struct {
	size resource.Quantity
	// inUseErr: the driver answered FailedPrecondition (it cannot expand
	// the volume while in use): no more online expansion while mounted.
	inUseErr bool
	// finalErr: an expansion failed with a final error.
	finalErr bool
}

// expandPlan is what the node does about a mounted claim's volume.
type expandPlan struct {
	// call: NodeExpandVolume to newSize.
	call    bool
	newSize resource.Quantity
	// markInProgress: the claim says NodeResizeInProgress before the
	// call; finish: its capacity is newSize after it, the resize status
	// and conditions gone.
	markInProgress, finish bool
	// resized: no call, the node's size is newSize (the claim is at it
	// already: the expansion was done elsewhere).
	resized bool
	// legacy: an old resizer's claim (no allocatedResources).
	legacy bool
	// infeasibleOnFailure: a failure marks the expansion infeasible (the
	// user changed the request after a final error).
	infeasibleOnFailure bool
}

// planExpansion is the kubelet's decision for a mounted volume of pvc
// bound to pv, the node knowing it at st: volumeNeedsExpansion (the PV
// grown beyond the node's size), then NodeExpander.runPreCheck (the
// claim's allocated size and resize status) or, for a claim of a resizer
// older than RecoverVolumeExpansionFailure, the legacy expansion to the
// PV's capacity.
func planExpansion(st volumeSize, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) expandPlan {
	desired := pv.Spec.Capacity[v1.ResourceStorage]
	if st.inUseErr || st.size.IsZero() || desired.IsZero() || desired.Cmp(st.size) <= 0 {
		return expandPlan{}
	}
	resizeStatus := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	statusCap := pvc.Status.Capacity[v1.ResourceStorage]
	if resizeStatus == "" && pvc.Status.AllocatedResources == nil {
		return expandPlan{call: true, newSize: desired, finish: statusCap.Cmp(desired) < 0, legacy: true}
	}
	newSize, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]
	if !ok || newSize.IsZero() {
		newSize = desired
	}
	spec := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	p := expandPlan{newSize: newSize, infeasibleOnFailure: spec.Cmp(newSize) != 0 && st.finalErr}
	already := statusCap.Cmp(newSize) >= 0 && resizeStatus == ""
	switch {
	case already && slices.Contains(pvc.Spec.AccessModes, v1.ReadWriteMany) && !metav1.HasAnnotation(pvc.ObjectMeta, nodeExpansionNotRequired):
		// Each node of a ReadWriteMany volume expands its own mount,
		// the claim done already.
		p.call = true
	case resizeStatus == v1.PersistentVolumeClaimNodeResizePending || resizeStatus == v1.PersistentVolumeClaimNodeResizeInProgress:
		p.call, p.markInProgress, p.finish = true, true, true
	case already:
		p.resized = true
	}
	return p
}

// errExpandNotSupported: the driver has no EXPAND_VOLUME.
var errExpandNotSupported = errors.New("NodeExpand is not supported by the CSI driver")

// errDriverMissing: the driver is not registered, a transient failure
// for the kubelet (no resize error on the claim).
type errDriverMissing struct{ err error }

func (e errDriverMissing) Error() string { return e.err.Error() }

// expandFailure classifies a NodeExpandVolume error as the kubelet's
// expander: FailedPrecondition is an in-use error (never retried while
// mounted), InvalidArgument, OutOfRange and NotFound are infeasible.
func expandFailure(err error) (inUse, infeasible bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false, false
	}
	switch se.GRPCStatus().Code() {
	case codes.FailedPrecondition:
		return true, false
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return false, true
	}
	return false, false
}

// nodeExpand is the CSI plugin's NodeExpand: NodeExpandVolume of the
// published volume to size, with its staging path if the driver stages.
func (m *Manager) nodeExpand(ctx context.Context, u claimUse, pv *v1.PersistentVolume, size resource.Quantity) error {
	conn, err := m.conn(u.v.driver)
	if err != nil {
		return errDriverMissing{err}
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := node.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("Expander.NodeExpand failed to check if node supports expansion : %v", err)
	}
	if !hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_EXPAND_VOLUME) {
		return fmt.Errorf("%w %s", errExpandNotSupported, u.v.driver)
	}
	secrets, err := m.secret(ctx, pv.Spec.CSI.NodeExpandSecretRef)
	if err != nil {
		ref := pv.Spec.CSI.NodeExpandSecretRef
		return fmt.Errorf("expander.NodeExpand failed to get NodeExpandSecretRef %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	req := &csipb.NodeExpandVolumeRequest{VolumeId: u.v.handle, VolumePath: u.target, Secrets: secrets,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size.Value()},
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: u.v.fsType, MountFlags: pv.Spec.MountOptions}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(firstAccessMode(pv),
				hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER))}}}
	staged := hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if staged {
		req.StagingTargetPath = StagingPath(m.layout, u.v.driver, u.v.handle)
	}
	if u.v.block {
		// The kubelet's block expansion: the device's publish path (its
		// DevicePath), the block staging path, a block capability.
		req.VolumeCapability.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		if staged {
			req.StagingTargetPath = BlockStagingPath(m.layout, u.v.specName)
		}
	}
	if _, err := node.NodeExpandVolume(cctx, req); err != nil {
		return fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err)
	}
	return nil
}

func firstAccessMode(pv *v1.PersistentVolume) v1.PersistentVolumeAccessMode {
	if len(pv.Spec.AccessModes) > 0 {
		return pv.Spec.AccessModes[0]
	}
	return v1.ReadWriteOnce
}

// isResizeCondition: the kubelet's knownResizeConditions.
func isResizeCondition(t v1.PersistentVolumeClaimConditionType) bool {
	switch t {
	case v1.PersistentVolumeClaimFileSystemResizePending, v1.PersistentVolumeClaimResizing,
		v1.PersistentVolumeClaimControllerResizeError, v1.PersistentVolumeClaimNodeResizeError:
		return true
	}
	return false
}

// mergeResizeConditions is the kubelet's MergeResizeConditionOnPVC: the
// claim's other conditions kept, a resize condition replaced by a new one
// of its type only if its status changes, the other resize conditions kept
// only with keepOld, the new ones not there added.
func mergeResizeConditions(old, add []v1.PersistentVolumeClaimCondition, keepOld bool) []v1.PersistentVolumeClaimCondition {
	out := []v1.PersistentVolumeClaimCondition{}
	done := map[v1.PersistentVolumeClaimConditionType]bool{}
	for _, c := range old {
		if !isResizeCondition(c.Type) {
			out = append(out, c)
			continue
		}
		if i := slices.IndexFunc(add, func(n v1.PersistentVolumeClaimCondition) bool { return n.Type == c.Type }); i >= 0 {
			if add[i].Status != c.Status {
				out = append(out, add[i])
			} else {
				out = append(out, c)
			}
			done[c.Type] = true
		} else if keepOld {
			out = append(out, c)
		}
	}
	for _, n := range add {
		if !done[n.Type] {
			out = append(out, n)
		}
	}
	return out
}

// patchClaimStatus writes the claim's storage resize status: status
// "NodeResizeInProgress" (MarkNodeExpansionInProgress), or "" with size
// (MarkNodeExpansionFinishedWithRecovery: the capacity, the resize status
// and conditions gone), checked against the claim's resourceVersion as
// the kubelet's PatchPVCStatus.
func (m *Manager) patchClaimStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, size *resource.Quantity, st v1.ClaimResourceStatus) (*v1.PersistentVolumeClaim, error) {
	s := map[string]any{}
	if st != "" {
		s["allocatedResourceStatuses"] = map[string]any{string(v1.ResourceStorage): string(st)}
	} else {
		s["allocatedResourceStatuses"] = map[string]any{string(v1.ResourceStorage): nil}
		s["conditions"] = mergeResizeConditions(pvc.Status.Conditions, nil, false)
	}
	if size != nil {
		s["capacity"] = map[string]any{string(v1.ResourceStorage): size.String()}
	}
	return m.patchClaim(ctx, pvc, map[string]any{"metadata": map[string]any{"resourceVersion": pvc.ResourceVersion}, "status": s})
}

// markExpansionFailed is the kubelet's MarkNodeExpansionFailedCondition
// (a NodeResizeError condition) or, infeasible, MarkNodeExpansionInfeasible
// (the resize status NodeResizeInfeasible too), unchecked against the
// resourceVersion as the kubelet's.
func (m *Manager) markExpansionFailed(ctx context.Context, pvc *v1.PersistentVolumeClaim, cause error, infeasible bool) (*v1.PersistentVolumeClaim, error) {
	cond := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(m.clock.Now()), Message: fmt.Sprintf("failed to expand pvc with %v", cause)}
	s := map[string]any{"conditions": mergeResizeConditions(pvc.Status.Conditions, []v1.PersistentVolumeClaimCondition{cond}, true)}
	if infeasible {
		s["allocatedResourceStatuses"] = map[string]any{string(v1.ResourceStorage): string(v1.PersistentVolumeClaimNodeResizeInfeasible)}
	}
	return m.patchClaim(ctx, pvc, map[string]any{"status": s})
}

func (m *Manager) patchClaim(ctx context.Context, pvc *v1.PersistentVolumeClaim, patch map[string]any) (*v1.PersistentVolumeClaim, error) {
	b, err := json.Marshal(patch)
	if err != nil {
		return pvc, err
	}
	out, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
	if err != nil {
		return pvc, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %v", pvc.Name, err)
	}
	return out, nil
}

// expand runs the plan for one mounted volume of the claim (the pod's
// use of it), as the kubelet's expandOnPlugin and legacy expansion: an
// error is retried with back-off by the caller; FailedPrecondition ends
// online expansion for the volume while mounted.
func (m *Manager) expand(ctx context.Context, u claimUse, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, st *volumeSize) error {
	p := planExpansion(*st, pvc, pv)
	if p.resized {
		st.size = p.newSize
	}
	if !p.call {
		return nil
	}
	fields := log.Fields{"pod": u.pod.Namespace + "/" + u.pod.Name, "volume": pv.Name, "size": p.newSize.String()}
	var err error
	if p.markInProgress {
		if pvc, err = m.patchClaimStatus(ctx, pvc, nil, v1.PersistentVolumeClaimNodeResizeInProgress); err != nil {
			return m.expandFailed(u, pv, fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err))
		}
	}
	if err := m.nodeExpand(ctx, u, pv, p.newSize); err != nil {
		if errors.Is(err, errExpandNotSupported) && (p.legacy || !p.finish) {
			// Nothing for the node to do, the claim done already.
			st.size = p.newSize
			return nil
		}
		inUse, infeasible := expandFailure(err)
		if !p.legacy && !errors.As(err, new(errDriverMissing)) {
			st.finalErr = true
			if _, merr := m.markExpansionFailed(ctx, pvc, err, infeasible || p.infeasibleOnFailure); merr != nil {
				log.WithError(merr).WithFields(fields).Warn("csi: MountVolume.NodeExpandVolume failed to mark node expansion as failed")
			}
		}
		if inUse {
			st.inUseErr = true
			log.WithError(err).WithFields(fields).Warn("csi: NodeExpandVolume: the driver cannot expand the volume while it is in use")
			return nil
		}
		return m.expandFailed(u, pv, err)
	}
	msg := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pv.Name, m.cfg.NodeName)
	if m.cfg.Events != nil {
		m.cfg.Events.Event(u.pod, v1.EventTypeNormal, "FileSystemResizeSuccessful", msg)
		m.cfg.Events.Event(pvc, v1.EventTypeNormal, "FileSystemResizeSuccessful", msg)
	}
	log.WithFields(fields).Info("csi: " + msg)
	if p.finish {
		if _, err := m.patchClaimStatus(ctx, pvc, &p.newSize, ""); err != nil {
			return m.expandFailed(u, pv, fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err))
		}
	}
	st.size = p.newSize
	return nil
}

// expandFailed is the kubelet's VolumeResizeFailed warning on the pod.
func (m *Manager) expandFailed(u claimUse, pv *v1.PersistentVolume, err error) error {
	err = fmt.Errorf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %w", pv.Name, err)
	if m.cfg.Events != nil {
		m.cfg.Events.Event(u.pod, v1.EventTypeWarning, "VolumeResizeFailed", err.Error())
	}
	return err
}

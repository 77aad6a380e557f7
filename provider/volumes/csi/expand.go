package csi

import (
	"context"
	"encoding/json"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// expansionNeeded is the kubelet's NodeExpander pre-check: the claim's
// volume grew (the resizer set the PV's capacity and marked the claim
// NodeResizePending) past what the claim's status says, and the node's
// part is still to do.
func expansionNeeded(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (resource.Quantity, bool) {
	newSize := pv.Spec.Capacity[v1.ResourceStorage]
	status := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	if status != v1.PersistentVolumeClaimNodeResizePending && status != v1.PersistentVolumeClaimNodeResizeInProgress {
		return newSize, false
	}
	cur := pvc.Status.Capacity[v1.ResourceStorage]
	return newSize, newSize.Cmp(cur) > 0
}

// expand is the kubelet's online expansion of a published volume: when
// its claim waits for the node (NodeResizePending), a driver with
// EXPAND_VOLUME is asked NodeExpandVolume for the PV's new size, and the
// claim's status then says the new capacity with the resize status
// cleared. Claim and PV are read fresh: the pod's were resolved once.
func (m *Manager) expand(ctx context.Context, pod *v1.Pod, v volume, target string) error {
	if v.pvc == "" || m.cfg.Client == nil {
		return nil
	}
	pvc, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.pvc, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pv, err := m.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, v.specName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	newSize, needed := expansionNeeded(pvc, pv)
	if !needed {
		return nil
	}
	conn, err := m.conn(v.driver)
	if err != nil {
		return err
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := node.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return err
	}
	if !hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_EXPAND_VOLUME) {
		return nil
	}
	// The claim as this patch left it: the next patch is checked against
	// its resourceVersion.
	if pvc, err = m.patchClaimStatus(ctx, pvc, nil, v1.PersistentVolumeClaimNodeResizeInProgress); err != nil {
		return fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err)
	}
	req := &csipb.NodeExpandVolumeRequest{VolumeId: v.handle, VolumePath: target,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: newSize.Value()},
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: v.fsType, MountFlags: v.options}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(firstAccessMode(pv),
				hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER))}}}
	if hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		req.StagingTargetPath = StagingPath(m.layout, v.driver, v.handle)
	}
	if _, err := node.NodeExpandVolume(cctx, req); err != nil {
		return fmt.Errorf("MountVolume.NodeExpandVolume failed for volume %q : %w", v.specName, err)
	}
	log.WithFields(log.Fields{"pod": pod.Namespace + "/" + pod.Name, "volume": v.specName, "size": newSize.String()}).
		Info("csi: MountVolume.NodeExpandVolume succeeded")
	if _, err := m.patchClaimStatus(ctx, pvc, &newSize, ""); err != nil {
		return fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err)
	}
	return nil
}

func firstAccessMode(pv *v1.PersistentVolume) v1.PersistentVolumeAccessMode {
	if len(pv.Spec.AccessModes) > 0 {
		return pv.Spec.AccessModes[0]
	}
	return v1.ReadWriteOnce
}

// patchClaimStatus sets the claim's storage resize status (status "":
// removed, with capacity set to size and the resize conditions gone, as
// the kubelet's MarkNodeExpansionFinishedWithRecovery), checked against
// the claim's resourceVersion as the kubelet's PatchPVCStatus.
func (m *Manager) patchClaimStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, size *resource.Quantity, status v1.ClaimResourceStatus) (*v1.PersistentVolumeClaim, error) {
	st := map[string]any{}
	if status != "" {
		st["allocatedResourceStatuses"] = map[string]any{string(v1.ResourceStorage): string(status)}
	} else {
		st["allocatedResourceStatuses"] = map[string]any{string(v1.ResourceStorage): nil}
		var conds []v1.PersistentVolumeClaimCondition
		for _, c := range pvc.Status.Conditions {
			if c.Type != v1.PersistentVolumeClaimResizing && c.Type != v1.PersistentVolumeClaimFileSystemResizePending &&
				c.Type != v1.PersistentVolumeClaimControllerResizeError && c.Type != v1.PersistentVolumeClaimNodeResizeError {
				conds = append(conds, c)
			}
		}
		st["conditions"] = conds
	}
	if size != nil {
		st["capacity"] = map[string]any{string(v1.ResourceStorage): size.String()}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": pvc.ResourceVersion}, "status": st})
	if err != nil {
		return nil, err
	}
	return m.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
}

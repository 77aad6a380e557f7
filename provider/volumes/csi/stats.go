package csi

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// publishedVolume is where a pod's CSI volume is published, for
// NodeGetVolumeStats.
type publishedVolume struct {
	driver, handle, target, staging string
}

func (m *Manager) published(uid types.UID, v volume, target string) {
	pv := publishedVolume{driver: v.driver, handle: v.handle, target: target}
	if !v.ephemeral {
		pv.staging = StagingPath(m.layout, v.driver, v.handle)
	}
	m.publishedAt(uid, v.podVolume, pv)
}

// publishedAt records where the pod's volume podVolume is published.
func (m *Manager) publishedAt(uid types.UID, podVolume string, pv publishedVolume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods[uid] == nil {
		m.pods[uid] = map[string]publishedVolume{}
	}
	m.pods[uid][podVolume] = pv
}

// VolumeStats is a volume's usage as its driver reports it.
type VolumeStats struct {
	CapacityBytes, AvailableBytes, UsedBytes int64
	Inodes, InodesFree, InodesUsed           int64
}

// VolumeStats asks the driver of the pod's CSI volume volName for its
// usage (NodeGetVolumeStats), as the kubelet's csi metrics provider: ok
// is false for a volume not published here or a driver without
// GET_VOLUME_STATS.
func (m *Manager) VolumeStats(ctx context.Context, pod *v1.Pod, volName string) (VolumeStats, bool, error) {
	m.mu.Lock()
	pv, ok := m.pods[pod.UID][volName]
	m.mu.Unlock()
	if !ok {
		return VolumeStats{}, false, nil
	}
	conn, err := m.conn(pv.driver)
	if err != nil {
		return VolumeStats{}, false, err
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	caps, err := node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return VolumeStats{}, false, err
	}
	if !hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS) {
		return VolumeStats{}, false, nil
	}
	req := &csipb.NodeGetVolumeStatsRequest{VolumeId: pv.handle, VolumePath: pv.target}
	if hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		req.StagingTargetPath = pv.staging
	}
	res, err := node.NodeGetVolumeStats(ctx, req)
	if err != nil {
		return VolumeStats{}, false, fmt.Errorf("NodeGetVolumeStats: %w", err)
	}
	st, err := usageStats(res.GetUsage())
	return st, err == nil, err
}

// usageStats is the kubelet's reading of NodeGetVolumeStats' usage: bytes
// and inodes, a negative figure refused.
func usageStats(usage []*csipb.VolumeUsage) (VolumeStats, error) {
	var st VolumeStats
	if len(usage) == 0 {
		return st, fmt.Errorf("failed to get usage from response. usage is nil")
	}
	for _, u := range usage {
		if u == nil {
			continue
		}
		if u.Total < 0 || u.Available < 0 || u.Used < 0 {
			return VolumeStats{}, fmt.Errorf("invalid usage %v", u)
		}
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			st.CapacityBytes, st.AvailableBytes, st.UsedBytes = u.Total, u.Available, u.Used
		case csipb.VolumeUsage_INODES:
			st.Inodes, st.InodesFree, st.InodesUsed = u.Total, u.Available, u.Used
		}
	}
	return st, nil
}

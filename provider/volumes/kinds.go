package volumes

import v1 "k8s.io/api/core/v1"

// IsLocalEphemeral is the kubelet's IsLocalEphemeralVolume: the volumes on
// the node's disk that count as the pod's ephemeral storage (memory-backed
// emptyDirs do not).
func IsLocalEphemeral(v v1.Volume) bool {
	return v.GitRepo != nil || (v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault) || v.ConfigMap != nil
}

// HasStats: the kubelet reports the volumes it made on the node's disk or
// memory in the stats summary, not host paths or remote ones.
func HasStats(v v1.Volume) bool {
	return v.EmptyDir != nil || v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

package volumes

import v1 "k8s.io/api/core/v1"

// IsLocalEphemeral is the kubelet's IsLocalEphemeralVolume: the volumes on
// the node's disk that count as the pod's ephemeral storage (memory-backed
// emptyDirs do not).
func IsLocalEphemeral(v v1.Volume) bool {
	return v.GitRepo != nil || (v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault) || v.ConfigMap != nil
}

// HasStats: the kubelet reports the volumes it made on the node's disk or
// memory in the stats summary, not host paths, remote ones or image
// volumes (the image's layers are the image filesystem's).
func HasStats(v v1.Volume) bool {
	return v.EmptyDir != nil || v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

// PluginName is the qualified name of the kubelet's volume plugin for an
// inline volume source (its directory in the pod's volumes), "" for a
// claim, whose plugin is its PersistentVolume's.
func PluginName(src *v1.VolumeSource) string {
	switch {
	case src.EmptyDir != nil:
		return "kubernetes.io/empty-dir"
	case src.ConfigMap != nil:
		return "kubernetes.io/configmap"
	case src.Secret != nil:
		return "kubernetes.io/secret"
	case src.DownwardAPI != nil:
		return "kubernetes.io/downward-api"
	case src.Projected != nil:
		return "kubernetes.io/projected"
	case src.HostPath != nil:
		return "kubernetes.io/host-path"
	case src.GitRepo != nil:
		return "kubernetes.io/git-repo"
	case src.CSI != nil:
		return "kubernetes.io/csi"
	case src.Image != nil:
		return "kubernetes.io/image"
	}
	return ""
}

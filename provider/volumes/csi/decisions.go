package csi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// supportedVersion is the kubelet's check of a CSI plugin's versions: one
// of them must be a 1.x.
func supportedVersion(versions []string) error {
	for _, v := range versions {
		major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
		if n, err := strconv.Atoi(major); err == nil && n == 1 {
			return nil
		}
	}
	return fmt.Errorf("none of the versions specified %q are supported by this version of the kubelet", versions)
}

// attachRequired: a driver without a CSIDriver object is attached, as
// for the kubelet (and the attach/detach controller).
func attachRequired(d *storagev1.CSIDriver) bool {
	return d == nil || d.Spec.AttachRequired == nil || *d.Spec.AttachRequired
}

// podInfoOnMount: the driver wants the pod's identity in the volume context.
func podInfoOnMount(d *storagev1.CSIDriver) bool {
	return d != nil && d.Spec.PodInfoOnMount != nil && *d.Spec.PodInfoOnMount
}

// lifecycleModeAllowed is the kubelet's supportsVolumeLifecycleMode: a
// driver without a CSIDriver object, or without modes, is Persistent only.
func lifecycleModeAllowed(driver string, d *storagev1.CSIDriver, mode storagev1.VolumeLifecycleMode) error {
	if d == nil {
		if mode == storagev1.VolumeLifecyclePersistent {
			return nil
		}
		return fmt.Errorf("volume mode %q not supported by driver %s (no CSIDriver object)", mode, driver)
	}
	modes := d.Spec.VolumeLifecycleModes
	if len(modes) == 0 {
		modes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if !slices.Contains(modes, mode) {
		return fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", mode, driver, d.Spec.VolumeLifecycleModes)
	}
	return nil
}

// podInfo is the volume context the kubelet adds for podInfoOnMount.
func podInfo(pod *v1.Pod, ephemeral bool) map[string]string {
	return map[string]string{
		"csi.storage.k8s.io/pod.name":            pod.Name,
		"csi.storage.k8s.io/pod.namespace":       pod.Namespace,
		"csi.storage.k8s.io/pod.uid":             string(pod.UID),
		"csi.storage.k8s.io/serviceAccount.name": pod.Spec.ServiceAccountName,
		"csi.storage.k8s.io/ephemeral":           strconv.FormatBool(ephemeral),
	}
}

// accessMode maps a PV's first access mode to CSI's as the kubelet does
// (asCSIAccessModeV1): ReadWriteOncePod is SINGLE_NODE_SINGLE_WRITER only
// for a driver with the SINGLE_NODE_MULTI_WRITER capability, which also
// makes ReadWriteOnce SINGLE_NODE_MULTI_WRITER.
func accessMode(m v1.PersistentVolumeAccessMode, multiWriter bool) csipb.VolumeCapability_AccessMode_Mode {
	switch m {
	case v1.ReadWriteOnce:
		if multiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadOnlyMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case v1.ReadWriteOncePod:
		if multiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
	return csipb.VolumeCapability_AccessMode_UNKNOWN
}

// fsGroupApplies is the kubelet's supportsFSGroup: whether the kubelet
// (not the driver) changes a published volume's group to the pod's
// fsGroup. ReadWriteOnceWithFSType (the default) applies it to a
// writable volume with an fsType whose PV has ReadWriteOnce(Pod) among its
// access modes; an inline volume counts as ReadWriteOnce.
func fsGroupApplies(policy *storagev1.FSGroupPolicy, fsType string, pv *v1.PersistentVolume, readOnly bool) bool {
	p := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if policy != nil {
		p = *policy
	}
	switch {
	case p == storagev1.NoneFSGroupPolicy || readOnly:
		return false
	case p == storagev1.FileFSGroupPolicy:
		return true
	case fsType == "":
		return false
	case pv == nil:
		return true
	}
	return slices.ContainsFunc(pv.Spec.AccessModes, func(m v1.PersistentVolumeAccessMode) bool {
		return m == v1.ReadWriteOnce || m == v1.ReadWriteOncePod
	})
}

// hasNodeCap: the driver's NodeGetCapabilities answer has the RPC.
func hasNodeCap(caps []*csipb.NodeServiceCapability, t csipb.NodeServiceCapability_RPC_Type) bool {
	for _, c := range caps {
		if c.GetRpc().GetType() == t {
			return true
		}
	}
	return false
}

// topologyKeys are the keys of a NodeGetInfo's accessible topology,
// sorted, as the CSINode lists them.
func topologyKeys(t *csipb.Topology) []string {
	var keys []string
	for k := range t.GetSegments() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func mergeMap(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

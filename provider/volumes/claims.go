package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/component-helpers/storage/ephemeral"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// API is what resolving a claim reads of the cluster, with the node's own
// credentials: the node authorizer lets a node GET the claims of its pods
// and the volumes bound to them, not list or watch them, so the kubelet
// GETs them too.
type API interface {
	PersistentVolumeClaims(namespace string) corev1client.PersistentVolumeClaimInterface
	PersistentVolumes() corev1client.PersistentVolumeInterface
}

// Claim is a pod's volume backed by a PersistentVolumeClaim, its own or
// the one the ephemeral volume controller made for a generic ephemeral
// volume, resolved to the PersistentVolume bound to it.
type Claim struct {
	PVC *v1.PersistentVolumeClaim
	PV  *v1.PersistentVolume
	// ReadOnly is the pod's volume source's readOnly: a PV is mounted
	// read-only when the pod says so (the kubelet's spec.ReadOnly); a local
	// PV also by its mount options.
	ReadOnly bool
}

// Name is the volume's name where the kubelet names it: its PV's, in the
// pod's volume directory and in MountVolume events.
func (c *Claim) Name() string { return c.PV.Name }

// Block is whether the claim's PV is a block device the pod's containers
// get through volumeDevices (volumeMode: Block), not a mount.
func (c *Claim) Block() bool {
	return c.PV.Spec.VolumeMode != nil && *c.PV.Spec.VolumeMode == v1.PersistentVolumeBlock
}

// pvcProtectionFinalizer keeps a claim in use from going away: a claim
// being deleted with it is still usable (it waits for the pods to go).
const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

// ClaimName is the claim a pod's volume uses and whether the pod's
// source says read-only; ok is false for a volume with no claim. A
// generic ephemeral volume's claim is <pod>-<volume>, never read-only
// from the pod's side, as for the kubelet.
func ClaimName(pod *v1.Pod, vol *v1.Volume) (name string, readOnly, ok bool) {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly, true
	case vol.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, vol), false, true
	}
	return "", false, false
}

// Resolve finds the PersistentVolume of the pod's volume vol (one with a
// claim) as the kubelet's desired state of world populator does: the
// claim must exist, be bound (or be deleted while still protected), belong
// to the pod if it is a generic ephemeral volume, and be the claim its
// volume is bound to; the volume's mode must suit how the pod's containers
// use it. Errors are the kubelet's, which the pod's FailedMount event
// carries while hostlet retries.
func Resolve(ctx context.Context, api API, pod *v1.Pod, vol *v1.Volume) (*Claim, error) {
	name, readOnly, ok := ClaimName(pod, vol)
	if !ok {
		return nil, fmt.Errorf("volume %s has no claim", vol.Name)
	}
	pvc, err := api.PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: failed to fetch PVC from API server: %v", pod.Namespace, name, err)
	}
	if err := usableClaim(pvc); err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: %v", pod.Namespace, name, err)
	}
	if vol.Ephemeral != nil {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return nil, err
		}
	}
	pv, err := boundVolume(ctx, api, pvc)
	if err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: %v", pod.Namespace, name, err)
	}
	if pv.Spec.VolumeMode == nil {
		return nil, fmt.Errorf("cannot get volumeMode for volume: %v", pv.Name)
	}
	mounts, devices := podVolumeNames(pod)
	mode := *pv.Spec.VolumeMode
	if mounts[vol.Name] && mode != v1.PersistentVolumeFilesystem {
		return nil, fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", vol.Name, mode)
	}
	if devices[vol.Name] && mode != v1.PersistentVolumeBlock {
		return nil, fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", vol.Name, mode)
	}
	return &Claim{PVC: pvc, PV: pv, ReadOnly: readOnly}, nil
}

// usableClaim is the kubelet's getPVCExtractPV check of a claim.
func usableClaim(pvc *v1.PersistentVolumeClaim) error {
	if pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer) {
		return errors.New("PVC is being deleted")
	}
	if pvc.Status.Phase != v1.ClaimBound {
		return errors.New("PVC is not bound")
	}
	if pvc.Spec.VolumeName == "" {
		return errors.New("PVC has empty pvc.Spec.VolumeName")
	}
	return nil
}

// boundVolume is the kubelet's getPVSpec: the claim's volume, which must
// be bound to that very claim (not one of the same name before it).
func boundVolume(ctx context.Context, api API, pvc *v1.PersistentVolumeClaim) (*v1.PersistentVolume, error) {
	name := pvc.Spec.VolumeName
	pv, err := api.PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to fetch PV %s from API server: %v", name, err)
	}
	if pv.Spec.ClaimRef == nil {
		return nil, fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", name)
	}
	if pv.Spec.ClaimRef.UID != pvc.UID {
		return nil, fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s",
			name, pv.Spec.ClaimRef.UID, pvc.UID)
	}
	return pv, nil
}

// podVolumeNames are the volumes the pod's containers (init and ephemeral
// ones too) mount and use as block devices.
func podVolumeNames(pod *v1.Pod) (mounts, devices map[string]bool) {
	mounts, devices = map[string]bool{}, map[string]bool{}
	add := func(ms []v1.VolumeMount, ds []v1.VolumeDevice) {
		for _, m := range ms {
			mounts[m.Name] = true
		}
		for _, d := range ds {
			devices[d.Name] = true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.Containers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	return mounts, devices
}

// UnprocessedError is the kubelet's error for a pod whose claims could not
// be resolved yet (its FailedMount event says "Unable to attach or mount
// volumes: " and this): the volumes named, none attachable, and the
// reasons joined as the kubelet's volume manager joins a pod's errors.
func UnprocessedError(volumes []string, errs []error) error {
	names := slices.Sorted(slices.Values(volumes))
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return fmt.Errorf("unmounted volumes=%v, unattached volumes=[], failed to process volumes=%v: %s",
		names, names, strings.Join(msgs, "; "))
}

// CheckNodeAffinity is the kubelet's check before it mounts a PV: its
// node affinity must match the node's labels (a local PV, or a hostPath
// one a provisioner made for one node, is only on that node).
func CheckNodeAffinity(pv *v1.PersistentVolume, nodeLabels map[string]string) error {
	return storagehelpers.CheckNodeAffinity(pv, nodeLabels)
}

// MountOptions are a PV's mount options as the kubelet reads them: the
// beta annotation first, then spec.mountOptions.
func MountOptions(pv *v1.PersistentVolume) []string {
	if mo, ok := pv.Annotations[v1.MountOptionAnnotation]; ok {
		var out []string
		for _, o := range strings.Split(mo, ",") {
			if o != "" {
				out = append(out, o)
			}
		}
		return out
	}
	return pv.Spec.MountOptions
}

// ReadWriteOncePod: the PV may be used by one pod only, which the kubelet
// enforces on its node when it is the volume's only access mode.
func ReadWriteOncePod(pv *v1.PersistentVolume) bool {
	return len(pv.Spec.AccessModes) == 1 && pv.Spec.AccessModes[0] == v1.ReadWriteOncePod
}

package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A pod's PersistentVolumeClaims (and generic ephemeral volumes, whose
// claims the ephemeral volume controller makes) are resolved to their
// PersistentVolumes once, as the kubelet's desired state of world populator
// processes a pod once: the result is kept, by pod and volume, until the
// pod's volumes are torn down, so refreshing a running pod's volumes and
// starting its containers read no claim again.

// podClaim is one of a pod's claims, resolved, and whether its volume is
// set up (mounted, for a local PV).
type podClaim struct {
	*volumes.Claim
	mounted bool
}

// claim is the pod's resolved claim of volume name, or nil.
func (m *Manager) claim(uid types.UID, name string) *podClaim {
	m.claimsMu.Lock()
	defer m.claimsMu.Unlock()
	return m.claims[uid][name]
}

// forgetClaims drops a pod's claims once its volumes are gone: a
// ReadWriteOncePod volume is free for another pod then.
func (m *Manager) forgetClaims(uid types.UID) {
	m.claimsMu.Lock()
	defer m.claimsMu.Unlock()
	delete(m.claims, uid)
}

// mountedElsewhere: a pod other than uid has the PV set up on this node.
// Called with claimsMu held.
func (m *Manager) mountedElsewhere(pv string, uid types.UID) bool {
	for other, cs := range m.claims {
		if other == uid {
			continue
		}
		for _, c := range cs {
			if c.mounted && c.PV.Name == pv {
				return true
			}
		}
	}
	return false
}

// resolveClaims resolves the claims of the pod not resolved yet. While
// one is missing, unbound or otherwise unusable the pod waits with the
// kubelet's FailedMount event, retried with the sandbox's back-off.
func (m *Manager) resolveClaims(ctx context.Context, pod *v1.Pod) error {
	var failed []string
	var errs []error
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if _, _, ok := volumes.ClaimName(pod, vol); !ok || m.claim(pod.UID, vol.Name) != nil {
			continue
		}
		var c *volumes.Claim
		err := errors.New("no API client to read PersistentVolumeClaims with")
		if m.cfg.PersistentVolumes != nil {
			c, err = volumes.Resolve(ctx, m.cfg.PersistentVolumes, pod, vol)
		}
		if err == nil {
			// An in-tree cloud PV is its CSI driver's from here on.
			c, err = migrateClaim(c)
		}
		if err != nil {
			failed, errs = append(failed, vol.Name), append(errs, err)
			continue
		}
		m.claimsMu.Lock()
		if m.claims == nil {
			m.claims = map[types.UID]map[string]*podClaim{}
		}
		if m.claims[pod.UID] == nil {
			m.claims[pod.UID] = map[string]*podClaim{}
		}
		m.claims[pod.UID][vol.Name] = &podClaim{Claim: c}
		m.claimsMu.Unlock()
	}
	if len(errs) > 0 {
		return &lifecycle.Failure{Reason: "FailedMount",
			Message: "Unable to attach or mount volumes: " + volumes.UnprocessedError(failed, errs).Error()}
	}
	return nil
}

// setUpClaim sets up the PV of a pod's resolved claim as the kubelet's
// operation generator does, in its order and with its messages (which
// name the PV): a PV no plugin serves is refused, a block PV is mapped
// (mapClaim), the PV's node affinity must match the node, and a
// ReadWriteOncePod volume may be in use by no other pod here; then its
// plugin sets it up. The claim is marked set up before the plugin's calls,
// which are not made under the lock every pod's volumes take (a driver's
// may take long), so a second pod of a ReadWriteOncePod volume is refused
// meanwhile; a failure unmarks it.
func (m *Manager) setUpClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume, content ContentFunc) error {
	m.claimsMu.Lock()
	c := m.claims[pod.UID][vol.Name]
	if c == nil {
		m.claimsMu.Unlock()
		return fmt.Errorf("the claim of volume %q is not resolved", vol.Name)
	}
	pv := c.PV
	s := &Spec{Volume: vol, Claim: c.Claim}
	p := findPlugin(s)
	if p == nil {
		m.claimsMu.Unlock()
		return claimFailure("MountVolume.SetUp failed", pv, errNotSupported)
	}
	if c.Block() {
		return m.mapClaim(ctx, pod, c, s, p)
	}
	if err := volumes.CheckNodeAffinity(pv, m.cfg.NodeLabels()); err != nil {
		m.claimsMu.Unlock()
		return claimFailure("MountVolume.NodeAffinity check failed", pv, err)
	}
	if mc, ok := p.(mountChecker); ok {
		if err := mc.CheckMount(s); err != nil {
			m.claimsMu.Unlock()
			return err
		}
	}
	if volumes.ReadWriteOncePod(pv) && m.mountedElsewhere(pv.Name, pod.UID) {
		m.claimsMu.Unlock()
		return claimFailure("MountVolume.SetUp failed", pv, errors.New("volume uses the ReadWriteOncePod access mode and is already in use by another pod"))
	}
	return m.markSetUp(pod.UID, vol.Name, c, s, func() error { return p.SetUp(ctx, m, pod, s, content) })
}

// markSetUp marks the claim set up (s.First saying whether another pod
// has its PV set up here), releases claimsMu, held by the caller, runs
// setUp and unmarks the claim if it fails.
func (m *Manager) markSetUp(uid types.UID, volName string, c *podClaim, s *Spec, setUp func() error) error {
	was := c.mounted
	s.First = !m.mountedElsewhere(c.PV.Name, uid)
	c.mounted = true
	m.claimsMu.Unlock()
	err := setUp()
	if err != nil {
		m.claimsMu.Lock()
		if m.claims[uid][volName] == c {
			c.mounted = was
		}
		m.claimsMu.Unlock()
	}
	return err
}

// claimFailure is a claim's error as the kubelet's FailedMount event says
// it: the operation, the PV's name and the reason.
func claimFailure(prefix string, pv *v1.PersistentVolume, err error) error {
	return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf("%s for volume %q : %v", prefix, pv.Name, err)}
}

// inlineFailure is an inline volume's error as the kubelet's event of
// that reason says it.
func inlineFailure(reason, prefix, volume string, err error) error {
	return &lifecycle.Failure{Reason: reason, Message: fmt.Sprintf("%s for volume %q : %v", prefix, volume, err)}
}

// mapFailure is claimFailure as the kubelet's FailedMapVolume event.
func mapFailure(prefix string, pv *v1.PersistentVolume, err error) error {
	f := claimFailure(prefix, pv, err).(*lifecycle.Failure)
	f.Reason = "FailedMapVolume"
	return f
}

// mapClaim maps a block PV (volumeMode: Block) for the pod as the
// kubelet's GenerateMapVolumeFunc does, with its messages: only the
// plugins that map devices can (the hostPath plugin is no block plugin
// for the kubelet either), the node affinity must match, a
// ReadWriteOncePod volume is one pod's; then the plugin maps it. Called
// with claimsMu held, which it releases.
func (m *Manager) mapClaim(ctx context.Context, pod *v1.Pod, c *podClaim, s *Spec, p plugin) error {
	pv := c.PV
	bp, ok := p.(blockPlugin)
	if !ok {
		m.claimsMu.Unlock()
		return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf(
			"MapVolume.FindMapperPluginBySpec failed to find BlockVolumeMapper plugin. Volume plugin is nil. for volume %q", pv.Name)}
	}
	if err := volumes.CheckNodeAffinity(pv, m.cfg.NodeLabels()); err != nil {
		m.claimsMu.Unlock()
		// The kubelet's event for this one is FailedMount.
		return claimFailure("MapVolume.NodeAffinity check failed", pv, err)
	}
	if volumes.ReadWriteOncePod(pv) && m.mountedElsewhere(pv.Name, pod.UID) {
		m.claimsMu.Unlock()
		return mapFailure("MapVolume.MapPodDevice failed", pv, errors.New("volume uses the ReadWriteOncePod access mode and is already in use by another pod"))
	}
	return m.markSetUp(pod.UID, s.Volume.Name, c, s, func() error { return bp.MapDevice(ctx, m, pod, s) })
}

// Device is the host path (the pod's symlink to the device) and the
// cgroup access of a container's volumeDevice, as the kubelet's
// makeBlockVolumes gives it to the runtime: "mrw", or "r" for a claim the
// pod's volume source says is read-only.
func (m *Manager) Device(pod *v1.Pod, d v1.VolumeDevice) (runtime.DeviceNode, error) {
	if !filepath.IsAbs(d.DevicePath) {
		return runtime.DeviceNode{}, fmt.Errorf("error DevicePath `%s` must be an absolute path", d.DevicePath)
	}
	m.claimsMu.Lock()
	defer m.claimsMu.Unlock()
	c := m.claims[pod.UID][d.Name]
	if c == nil || !c.mounted || !c.Block() {
		return runtime.DeviceNode{}, fmt.Errorf("cannot find volume %q to pass into container", d.Name)
	}
	perms := "mrw"
	if c.ReadOnly {
		perms = "r"
	}
	link := filepath.Join(m.layout.PodDeviceMapPath(pod.UID, PVPluginName(c.PV)), c.PV.Name)
	return runtime.DeviceNode{HostPath: link, ContainerPath: d.DevicePath, Permissions: perms}, nil
}

// claimMount is the host path and read-only-ness of a container's mount of
// a claim's volume, which SetUpPod set up: the claim's, or a "ro" mount
// option of its PV.
func (m *Manager) claimMount(pod *v1.Pod, vol *v1.Volume) (string, bool, error) {
	m.claimsMu.Lock()
	defer m.claimsMu.Unlock()
	c := m.claims[pod.UID][vol.Name]
	if c == nil || !c.mounted {
		return "", false, fmt.Errorf("volume %q is not set up", vol.Name)
	}
	s := &Spec{Volume: vol, Claim: c.Claim}
	p := findPlugin(s)
	if p == nil {
		return "", false, errNotSupported
	}
	host, ro := p.Path(m, pod, s)
	ro = ro || c.ReadOnly
	for _, o := range volumes.MountOptions(c.PV) {
		ro = ro || o == "ro"
	}
	return host, ro, nil
}

// Package volumemanager is the kubelet's volume manager for hostlet: a
// plugin per volume type (a file each: emptydir.go, hostpath.go,
// content.go, local.go, nfs.go, iscsi.go, csi.go, migrated.go (in-tree cloud
// volumes through their CSI drivers), image.go), the pods' claims resolved to
// their PersistentVolumes and which are set up where, the host paths
// containers mount (subPaths bound safely), and one teardown order.
package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/keymutex"
)

// Config is what the volume manager reads of the node and the cluster.
type Config struct {
	RootDir string
	// NodeLabels are the node's labels as the cluster has them: a
	// PersistentVolume's node affinity is matched against them.
	NodeLabels func() map[string]string
	// Allocatable is the node's allocatable resources: a memory-backed
	// emptyDir is at most its memory.
	Allocatable func() v1.ResourceList
	// PersistentVolumes, if set, reads the claims of pods' volumes and
	// their PersistentVolumes (the node's client).
	PersistentVolumes volumes.API
	// CSI, if set, publishes pods' CSI volumes (PersistentVolumes with a
	// csi source and inline ephemeral ones).
	CSI CSI
	// Secrets, if set, reads the secrets volumes name for their
	// credentials (iSCSI's CHAP) from the API, as the kubelet's plugins.
	Secrets Secrets
}

// Secrets reads secrets (the node's client).
type Secrets interface {
	Secrets(namespace string) corev1client.SecretInterface
}

// ContentFunc gives the files a content volume (configMap, secret,
// downwardAPI, projected) shows now, for one pass over a pod's volumes:
// what they project is read once per pass.
type ContentFunc func(ctx context.Context, vol *v1.Volume) (map[string]File, error)

// Manager sets up, finds and tears down pods' volumes.
type Manager struct {
	cfg    Config
	layout volumes.Layout

	// claims are the pods' resolved PersistentVolumeClaims, by pod and
	// volume name (claims.go).
	claimsMu sync.Mutex
	claims   map[types.UID]map[string]*podClaim

	// targets are locked by iSCSI target while a LUN of it is set up or
	// torn down, as the kubelet's targetLocks: a logout never races a
	// login.
	targets keymutex.KeyMutex
}

// deviceTearDowner is a plugin with a node-wide device per volume that
// pods' volumes are bound to (iSCSI's LUNs), released once no pod's is:
// after a pod's volumes are gone, its tearDownDevices finds (on disk) the
// devices no pod uses and releases them.
type deviceTearDowner interface {
	tearDownDevices(m *Manager) error
}

// New is the volume manager of the pods under cfg.RootDir.
func New(cfg Config) *Manager {
	if cfg.NodeLabels == nil {
		cfg.NodeLabels = func() map[string]string { return nil }
	}
	if cfg.Allocatable == nil {
		cfg.Allocatable = func() v1.ResourceList { return nil }
	}
	return &Manager{cfg: cfg, layout: volumes.NewLayout(cfg.RootDir), targets: keymutex.NewHashed(0)}
}

// Dirs are the pods' volume directories.
func (m *Manager) Dirs() Dirs { return Dirs{m.layout} }

// VolumeDir is where the pod's inline volume name lives on the host.
func (m *Manager) VolumeDir(pod *v1.Pod, name string) string { return m.Dirs().VolumeDir(pod, name) }

// SetUpPod makes every volume of the pod exist on the host, as the
// kubelet's volume manager before it starts a pod: the claims resolved
// first (the populator), then each volume in spec order. Content volumes
// are (re)written atomically with what content gives, so calling it again
// refreshes them. A failure is the kubelet's FailedMount (or
// FailedMapVolume) with its message.
func (m *Manager) SetUpPod(ctx context.Context, pod *v1.Pod, content ContentFunc) error {
	if err := m.resolveClaims(ctx, pod); err != nil {
		return err
	}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if err := m.setUp(ctx, pod, vol, content); err != nil {
			if f := (*lifecycle.Failure)(nil); errors.As(err, &f) {
				return f
			}
			return &lifecycle.Failure{Reason: "FailedMount",
				Message: fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", vol.Name, err)}
		}
	}
	return nil
}

func (m *Manager) setUp(ctx context.Context, pod *v1.Pod, vol *v1.Volume, content ContentFunc) error {
	if _, _, ok := volumes.ClaimName(pod, vol); ok {
		return m.setUpClaim(ctx, pod, vol, content)
	}
	s := &Spec{Volume: vol}
	p := findPlugin(s)
	if p == nil {
		return errNotSupported
	}
	return p.SetUp(ctx, m, pod, s, content)
}

// MountSource is the host path a container's mount of the pod's volume
// binds, and whether the volume makes it read-only, once SetUpPod set it
// up. Image volumes are the caller's (their images are pulled at a
// container's start): their path is "".
func (m *Manager) MountSource(pod *v1.Pod, vol *v1.Volume) (string, bool, error) {
	if _, _, ok := volumes.ClaimName(pod, vol); ok {
		return m.claimMount(pod, vol)
	}
	s := &Spec{Volume: vol}
	p := findPlugin(s)
	if p == nil {
		return "", false, errNotSupported
	}
	host, ro := p.Path(m, pod, s)
	return host, ro, nil
}

// StatFSDir is the host directory of the pod's volume whose stats are its
// filesystem's (statFSPlugin), once set up; ok is false for every other
// volume and for a block claim.
func (m *Manager) StatFSDir(pod *v1.Pod, vol *v1.Volume) (dir string, ok bool) {
	s := &Spec{Volume: vol}
	if _, _, claim := volumes.ClaimName(pod, vol); claim {
		m.claimsMu.Lock()
		c := m.claims[pod.UID][vol.Name]
		m.claimsMu.Unlock()
		if c == nil || !c.mounted || c.Block() {
			return "", false
		}
		s.Claim = c.Claim
	}
	p, ok := findPlugin(s).(statFSPlugin)
	if !ok {
		return "", false
	}
	dir, _ = p.Path(m, pod, s)
	return dir, true
}

// ReleasePod tears down the volumes of a pod that ended, as the kubelet's
// volume manager tears down a terminated pod's volumes: the CSI drivers
// unpublish theirs (subPath binds first), block volumes are unmapped, and
// the rest are unmounted and removed with their subPath binds; the rest of
// its directory (its containers' termination messages) stays until the
// pod is deleted. torn says there was anything to tear down. Its claims are
// forgotten whatever the outcome (a ReadWriteOncePod volume is free for
// another pod then): a pod that ended sets up nothing again.
func (m *Manager) ReleasePod(ctx context.Context, uid types.UID) (torn bool, err error) {
	defer m.forgetClaims(uid)
	if err := m.tearDownCSI(ctx, uid); err != nil {
		return false, fmt.Errorf("csi volumes not torn down; the pod's volumes stay: %w", err)
	}
	unmapped, err := m.layout.TearDownBlock(uid)
	if err != nil {
		return false, fmt.Errorf("block volumes not unmapped; the pod's volumes stay: %w", err)
	}
	subpaths, err := removeUnmounted(m.layout.PodSubPathsDir(uid))
	if err != nil {
		return false, fmt.Errorf("tearing down pod volumes: %w", err)
	}
	vols, err := removeUnmounted(m.layout.PodVolumesDir(uid))
	if err != nil {
		return false, fmt.Errorf("tearing down pod volumes: %w", err)
	}
	m.tearDownDevices()
	return unmapped || subpaths || vols, nil
}

// TearDownPod removes a deleted pod's directory once its volumes are torn
// down (the same order as ReleasePod's), never before: an error says which
// are not (still mounted, a driver's NodeUnpublish failed), and the caller
// retries. Its claims are forgotten.
func (m *Manager) TearDownPod(ctx context.Context, uid types.UID) error {
	defer m.forgetClaims(uid)
	if err := m.tearDownCSI(ctx, uid); err != nil {
		return fmt.Errorf("csi volumes not torn down; the pod's directory stays: %w", err)
	}
	if _, err := m.layout.TearDownBlock(uid); err != nil {
		return fmt.Errorf("block volumes not unmapped; the pod's directory stays: %w", err)
	}
	if _, err := removeUnmounted(m.layout.PodDir(uid)); err != nil {
		return err
	}
	m.tearDownDevices()
	return nil
}

// tearDownDevices releases the node-wide devices no pod uses any more. A
// failure (a logout refused) is logged, not the pod's: the pod's own
// volumes are gone, and the next teardown of any pod tries again, as the
// kubelet's reconciler does.
func (m *Manager) tearDownDevices() {
	for _, p := range plugins {
		if dt, ok := p.(deviceTearDowner); ok {
			if err := dt.tearDownDevices(m); err != nil {
				log.WithError(err).WithField("plugin", p.Name()).Warn("volume devices not released; tried again at the next pod's teardown")
			}
		}
	}
}

// removeUnmounted unmounts everything at or below dir and removes it,
// reporting whether it existed. Nothing is removed while anything below dir
// is still mounted: a removal would reach through the mount (a subPath of a
// hostPath volume is the host's own data).
func removeUnmounted(dir string) (bool, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err := unmountUnder(dir); err != nil {
		return true, fmt.Errorf("not removing %s: %w", dir, err)
	}
	return true, os.RemoveAll(dir)
}

// FSGroup is the pod's fsGroup, nil when it has none.
func FSGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

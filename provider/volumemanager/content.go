package volumemanager

import (
	"context"
	"os"

	v1 "k8s.io/api/core/v1"
)

// content is one of the kubelet's plugins whose volumes are files hostlet
// writes from API objects, never the pod (configMap, secret, downwardAPI,
// projected): published atomically as the kubelet's AtomicWriter does,
// and rewritten when SetUpPod is called again; always read-only to
// containers, as the kubelet mounts them since 1.10.
type content struct {
	name string
	is   func(*v1.VolumeSource) bool
	// tmpfs: the files never touch the disk (secrets and tokens).
	tmpfs bool
	// local: counted as the pod's ephemeral storage (the kubelet counts
	// configMaps only).
	local bool
}

var (
	configMapPlugin   = content{name: "kubernetes.io/configmap", is: func(s *v1.VolumeSource) bool { return s.ConfigMap != nil }, local: true}
	secretPlugin      = content{name: "kubernetes.io/secret", is: func(s *v1.VolumeSource) bool { return s.Secret != nil }, tmpfs: true}
	downwardAPIPlugin = content{name: "kubernetes.io/downward-api", is: func(s *v1.VolumeSource) bool { return s.DownwardAPI != nil }}
	projectedPlugin   = content{name: "kubernetes.io/projected", is: func(s *v1.VolumeSource) bool { return s.Projected != nil }, tmpfs: true}
)

func (c content) Name() string { return c.name }

func (c content) CanSupport(s *Spec) bool { return s.Claim == nil && c.is(&s.Volume.VolumeSource) }

func (c content) SetUp(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec, files ContentFunc) error {
	fs, err := files(ctx, s.Volume)
	if err != nil {
		return err
	}
	dir := m.VolumeDir(pod, s.Volume.Name)
	if c.tmpfs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := ensureTmpfs(dir, "mode=0755"); err != nil {
			return err
		}
	}
	fsGroup := FSGroup(pod)
	changed, err := writeAtomic(dir, fs, func(ts string) error { return applyFSGroup(ts, fsGroup, true) })
	if err != nil || !changed {
		return err
	}
	// The top directory and its new links too.
	return applyFSGroup(dir, fsGroup, true)
}

func (c content) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	return m.VolumeDir(pod, s.Volume.Name), true
}

func (c content) LocalEphemeral(*v1.Volume) bool { return c.local }
func (content) HasStats() bool                   { return true }

// IsContent: the volume's files are written by hostlet from API objects,
// never by the pod.
func IsContent(v *v1.Volume) bool {
	_, ok := inline(v).(content)
	return ok
}

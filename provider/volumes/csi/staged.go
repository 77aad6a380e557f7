package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/crash"
	"github.com/moby/sys/mountinfo"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
)

// isFinalError is the kubelet's (pkg/volume/csi): a gRPC error whose code
// says the driver may still be working on it (or did not get the call)
// leaves the operation uncertain; any other gRPC error is final, the
// driver saying it did not do it. An error that is not gRPC's (the
// connection failed, say) is uncertain.
func isFinalError(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

func (m *Manager) markStaged(uid types.UID, d volData) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.staged[uid] == nil {
		m.staged[uid] = map[string]volData{}
	}
	m.staged[uid][d.DriverName+"^"+d.VolumeHandle] = d
}

func (m *Manager) unmarkStaged(uid types.UID, driver, handle string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.staged[uid], driver+"^"+handle)
}

// removeStagingDir removes a staging directory and its vol_data.json
// after NodeStageVolume failed for good, never through a mount.
func (m *Manager) removeStagingDir(staging string) {
	if ok, err := mountinfo.Mounted(staging); err != nil || ok {
		return
	}
	_ = removeStaging(staging)
}

// removeStaging removes an unmounted staging directory, its
// vol_data.json and their directory.
func removeStaging(staging string) error {
	for _, p := range []string{staging, filepath.Join(filepath.Dir(staging), volDataFile), filepath.Dir(staging)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// unstageStaged unstages the volumes the pod had NodeStageVolume called
// for and no pod publishes now (a pod deleted while its stage was
// uncertain, or after a stage but before its publish): the published ones
// were unstaged with their unpublish already (their staging
// vol_data.json is gone then).
func (m *Manager) unstageStaged(ctx context.Context, uid types.UID) error {
	m.mu.Lock()
	vols := make([]volData, 0, len(m.staged[uid]))
	for _, d := range m.staged[uid] {
		vols = append(vols, d)
	}
	m.mu.Unlock()
	for _, d := range vols {
		if err := m.unstageOne(ctx, uid, d); err != nil {
			// The node's business from now on, not the pod's.
			m.unstageLater(uid, d, err)
		}
		m.unmarkStaged(uid, d.DriverName, d.VolumeHandle)
	}
	return nil
}

func (m *Manager) unstageOne(ctx context.Context, uid types.UID, d volData) error {
	defer m.lockVolume(d.DriverName, d.VolumeHandle)()
	staging := StagingPath(m.layout, d.DriverName, d.VolumeHandle)
	if _, err := os.Stat(filepath.Join(filepath.Dir(staging), volDataFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return m.callNode(ctx, d.DriverName, "attacher.UnmountDevice", func(ctx context.Context, node csipb.NodeClient) error {
		return m.unstageUnused(ctx, node, d, uid)
	})
}

// callNode calls f with driver's node service, within csiTimeout; op
// names the kubelet's operation in the error when the driver cannot be
// reached.
func (m *Manager) callNode(ctx context.Context, driver, op string, f func(context.Context, csipb.NodeClient) error) error {
	conn, err := m.conn(driver)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: %s failed to get CSI client: %w", op, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	return f(cctx, csipb.NewNodeClient(conn))
}

// unstageLeftOf unstages, once driver name registers, its staged volumes
// that no pod publishes, as the kubelet's reconciler unmounts a
// reconstructed device no pod uses (block volumes too, their devices no
// pod maps): after a restart of hostlet the retries
// of failed unstages (unstageLater, in memory) are gone, and a volume
// staged for a pod deleted while hostlet or the driver was down was never
// unstaged. Each volume is looked at under its lock, so a pod setting it
// up (staged, not published yet) is never undone; a failure is retried
// with back-off.
func (m *Manager) unstageLeftOf(ctx context.Context, name string) {
	// Run on a goroutine of its own: a panic costs this sweep, not the
	// node.
	defer func() { crash.Handle(recover(), log.WithField("driver", name), nil) }()
	dirs, err := m.stagedVolumes()
	if err != nil {
		log.WithError(err).WithField("driver", name).Warn("csi: listing the staged volumes")
		return
	}
	// Filesystem volumes first, then block ones: one sweep over both.
	var vols []volData
	for _, dir := range dirs {
		if d, err := readVolData(dir); err == nil {
			vols = append(vols, d)
		}
	}
	vols = append(vols, m.stagedBlockVolumes()...)
	for _, d := range vols {
		if d.DriverName != name {
			continue
		}
		if err := m.unstageLeftVolume(ctx, d); err != nil {
			m.unstageLater("", d, err)
		}
	}
}

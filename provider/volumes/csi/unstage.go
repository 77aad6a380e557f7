package csi

import (
	"context"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's back-off of a failing volume operation (its
// exponentialbackoff package): 500ms doubling up to 2m2s.
const (
	unstageBackoffInitial = 500 * time.Millisecond
	unstageBackoffMax     = 2*time.Minute + 2*time.Second
)

// unstageLater retries the NodeUnstageVolume of a volume no pod uses any
// more that failed with err. As with the kubelet, unstaging (its
// UnmountDevice) is the node's, apart from the pods' teardown: a pod
// whose volume is unpublished is done (its directory and API object go)
// even while its driver fails to unstage, and a new pod of the same volume
// stages it again (e2e CSI mock "two pods: should call NodeStage after
// previous NodeUnstage transient error"). A retry finding the volume
// published again leaves it to that pod's teardown. An attachable volume
// stays in the node's volumesInUse until it is unstaged (the kubelet's
// device still mounted), so the attach/detach controller does not detach
// it under its staging.
func (m *Manager) unstageLater(uid types.UID, d volData, err error) {
	key := d.DriverName + "^" + d.VolumeHandle
	name := UniqueName(d.DriverName, d.VolumeHandle)
	m.mu.Lock()
	if m.unstaging[key] {
		m.mu.Unlock()
		return
	}
	m.unstaging[key] = true
	if m.inUse[uid][name] {
		m.inUse[unstagingUID(key)] = map[v1.UniqueVolumeName]bool{name: true}
	}
	m.mu.Unlock()
	log.WithError(err).WithFields(log.Fields{"driver": d.DriverName, "volume": d.VolumeHandle}).Warn("csi: unstaging failed; retried")
	m.retryUnstage(d, unstageBackoffInitial)
}

func (m *Manager) retryUnstage(d volData, delay time.Duration) {
	t := m.clock.NewTimer(delay)
	go func() {
		// The node's goroutine, apart from any pod's: a panic costs this
		// retry, not the node.
		defer func() {
			crash.Handle(recover(), log.WithFields(log.Fields{"driver": d.DriverName, "volume": d.VolumeHandle}), nil)
		}()
		<-t.C()
		ctx, cancel := context.WithTimeout(context.Background(), csiTimeout)
		defer cancel()
		if err := m.unstageLeftVolume(ctx, d); err != nil {
			log.WithError(err).WithFields(log.Fields{"driver": d.DriverName, "volume": d.VolumeHandle}).Info("csi: unstaging failed again")
			m.retryUnstage(d, min(2*delay, unstageBackoffMax))
			return
		}
		key := d.DriverName + "^" + d.VolumeHandle
		m.mu.Lock()
		delete(m.unstaging, key)
		_, had := m.inUse[unstagingUID(key)]
		delete(m.inUse, unstagingUID(key))
		m.mu.Unlock()
		if had && m.cfg.Changed != nil {
			m.cfg.Changed()
		}
	}()
}

// unstagingUID is the key in inUse of a volume waiting to be unstaged,
// which no pod UID is.
func unstagingUID(key string) types.UID { return types.UID("unstaging/" + key) }

// unstageLeftVolume unstages d unless it is not staged any more or a pod
// publishes it again.
func (m *Manager) unstageLeftVolume(ctx context.Context, d volData) error {
	if d.blockPV != "" {
		return m.unmapDeviceLeft(ctx, d)
	}
	return m.unstageOne(ctx, "", d)
}

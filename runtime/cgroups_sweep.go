package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	log "github.com/sirupsen/logrus"
)

// QOSRefreshInterval is how often the QoS cgroups are set again besides
// at pod creation and removal, as the kubelet's qosContainerManager.
const QOSRefreshInterval = time.Minute

// unifiedMountpoint is cgroup v2's single hierarchy.
const unifiedMountpoint = "/sys/fs/cgroup"

// cgroupMounts are the hierarchies pod cgroups may be in: every v1
// controller's (and named ones) or the unified one.
func cgroupMounts(v2 bool) ([]string, error) {
	if v2 {
		return []string{unifiedMountpoint}, nil
	}
	ms, err := cgroups.GetCgroupMounts(false)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		if !seen[m.Mountpoint] {
			seen[m.Mountpoint] = true
			out = append(out, m.Mountpoint)
		}
	}
	return out, nil
}

// PodCgroupUIDs lists the pods that have a cgroup below kubepods or a QoS
// cgroup, in any hierarchy (one is enough), as the kubelet's
// GetAllPodsFromCgroups reads them for its orphan cleanup.
func (c *Cgroups) PodCgroupUIDs() ([]string, error) {
	if !c.perQOS {
		return nil, nil
	}
	mounts, err := c.mounts()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	var errs []error
	for _, m := range mounts {
		for _, qos := range []string{QOSGuaranteed, QOSBurstable, QOSBestEffort} {
			dir := filepath.Join(m, c.name(c.qosName(qos)))
			es, err := os.ReadDir(dir)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("reading cgroup %s: %w", dir, err))
				}
				continue
			}
			for _, e := range es {
				if uid, ok := c.podUID(e); ok && !seen[uid] {
					seen[uid] = true
					out = append(out, uid)
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

// podUID reads a pod's UID from its cgroup's directory: "pod<uid>" for
// cgroupfs, "<parent>-pod<uid with _ for ->.slice" for systemd.
func (c *Cgroups) podUID(e os.DirEntry) (string, bool) {
	if !e.IsDir() {
		return "", false
	}
	base := e.Name()
	if c.systemd {
		name, ok := strings.CutSuffix(base, ".slice")
		if !ok {
			return "", false
		}
		base = strings.ReplaceAll(name[strings.LastIndexByte(name, '-')+1:], "_", "-")
	}
	uid, ok := strings.CutPrefix(base, "pod")
	return uid, ok && uid != ""
}

// RefreshQOS sets the QoS cgroups every interval until ctx ends, as the
// kubelet's periodic UpdateCgroups: burstable is the Burstable pods' CPU
// requests, ok false while they are not known yet.
func (c *Cgroups) RefreshQOS(ctx context.Context, interval time.Duration, burstable func() (milliCPU int64, ok bool)) {
	if !c.perQOS {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if milli, ok := burstable(); ok {
			if err := c.UpdateQOS(milli); err != nil {
				log.WithError(err).Warn("updating the QoS cgroups")
			}
		}
	}
}

// PodCgroupUIDs lists the pods that have a cgroup on the host.
func (r *Runtime) PodCgroupUIDs() ([]string, error) { return r.cgroups.PodCgroupUIDs() }

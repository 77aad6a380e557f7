package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/opencontainers/cgroups"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// QOSRefreshInterval is how often the QoS cgroups are set again besides
// at pod creation and removal, as the kubelet's qosContainerManager.
const QOSRefreshInterval = time.Minute

// unifiedMountpoint is cgroup v2's single hierarchy.
const unifiedMountpoint = "/sys/fs/cgroup"

// hybridMountpoint is the v2 hierarchy of a hybrid host, where the
// library's v1 manager makes each cgroup too.
const hybridMountpoint = "/sys/fs/cgroup/unified"

// cgroupMounts are the hierarchies pod cgroups may be in: every v1
// controller's (and named ones) and a hybrid host's v2 one, or the
// unified one.
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
	if cgroups.IsCgroup2HybridMode() && !seen[hybridMountpoint] {
		out = append(out, hybridMountpoint)
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

// RemoveKubepods removes the kubepods cgroup and its QoS cgroups once no
// pod has a cgroup below them (`hostlet leave`, after its cleanup of the
// pods): with the systemd driver their slices are stopped (systemctl stop
// kubepods.slice), then what is left of them in each hierarchy (all of it
// with cgroupfs) is removed, deepest first. Without --cgroups-per-qos
// there is none.
func (c *Cgroups) RemoveKubepods(ctx context.Context) error {
	if !c.perQOS {
		return nil
	}
	uids, err := c.PodCgroupUIDs()
	if err != nil {
		return err
	}
	if len(uids) > 0 {
		return fmt.Errorf("pods still have cgroups below %s (uids %v)", c.name(c.pods), uids)
	}
	if c.systemd {
		for _, n := range []CgroupName{c.qosName(QOSBestEffort), c.qosName(QOSBurstable), c.pods} {
			if err := c.stopUnit(ctx, path.Base(c.name(n))); err != nil {
				return err
			}
		}
	}
	mounts, err := c.mounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		errs = append(errs, removeCgroupTree(filepath.Join(m, c.name(c.pods))))
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup directory and the cgroups below it,
// deepest first: a cgroup directory goes by rmdir only (its files are the
// kernel's), and only once it has no child and no process.
func removeCgroupTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// stopSystemdUnit stops a unit over the system bus and waits for the job,
// as systemctl stop does; a unit systemd does not know is stopped.
func stopSystemdUnit(ctx context.Context, name string) error {
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("connecting to systemd: %w", err)
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, name, "replace", done); err != nil {
		var derr godbus.Error
		if errors.As(err, &derr) && derr.Name == "org.freedesktop.systemd1.NoSuchUnit" {
			return nil
		}
		return fmt.Errorf("stopping %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("stopping %s: %s", name, res)
		}
		log.WithField("unit", name).Info("stopped")
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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

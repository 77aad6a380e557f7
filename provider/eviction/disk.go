package eviction

import (
	"context"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"path/filepath"
	"strings"

	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// resourceInodes is the kubelet's internal resource for inode signals.
const resourceInodes v1.ResourceName = "inodes"

// Disk is what pods keep on the node's disks: their log and volume
// directories (runtime.Runtime, podspec.Runtime) and the usage of those and
// of writable layers as last measured (diskusage.Cache, which the stats
// summary reads too).
type Disk interface {
	RootfsUsage(ctx context.Context, id string) (runtime.DiskUsage, error)
	LogDir(namespace, name, uid string) string
	VolumeDir(pod *v1.Pod, name string) string
	DirUsage(dir string) (runtime.DiskUsage, error)
}

// fsStats are the parts of a pod's local storage a disk signal counts.
type fsStats struct {
	rootfs, logs, volumes bool
}

// diskStatsFor is the kubelet's choice of what each disk signal ranks pods
// by: without a dedicated image filesystem everything is on nodefs; with
// one, writable layers are on imagefs and logs and volumes on nodefs.
func diskStatsFor(signal string, dedicatedImageFs bool) fsStats {
	if !dedicatedImageFs {
		return fsStats{rootfs: true, logs: true, volumes: true}
	}
	if signal == node.SignalImageFsAvailable || signal == node.SignalImageFsInodesFree {
		return fsStats{rootfs: true}
	}
	return fsStats{logs: true, volumes: true}
}

// containerDisk is one live container's writable layer and logs; nil
// where they could not be measured (the kubelet's stats leave them out).
type containerDisk struct {
	name         string
	rootfs, logs *runtime.DiskUsage
}

// diskUsage is what the eviction manager knows of a pod's local storage.
type diskUsage struct {
	containers []containerDisk
	volumes    []volumeDisk
}

// volumeDisk is one of the pod's volumes on the node: its local ephemeral
// ones, and memory-backed emptyDirs (for their sizeLimit only).
type volumeDisk struct {
	name  string
	local bool
	usage runtime.DiskUsage
}

// measureDisk is the local storage of the pods with live containers (the
// pods the kubelet's summary has stats for), as the usage cache last
// measured it.
func measureDisk(ctx context.Context, d Disk, pods []*v1.Pod, stats map[*v1.Pod]usage) map[*v1.Pod]diskUsage {
	out := map[*v1.Pod]diskUsage{}
	for _, p := range pods {
		u, ok := stats[p]
		if !ok {
			continue
		}
		ids := containerIDs(p)
		logDir := d.LogDir(p.Namespace, p.Name, string(p.UID))
		var du diskUsage
		for _, c := range u.containers {
			cd := containerDisk{name: c.name}
			if r, err := d.RootfsUsage(ctx, ids[c.name]); err == nil {
				cd.rootfs = &r
			} else {
				log.WithError(err).WithField("container", ids[c.name]).Debug("eviction manager: rootfs usage")
			}
			if l, err := d.DirUsage(filepath.Join(logDir, c.name)); err == nil {
				cd.logs = &l
			}
			du.containers = append(du.containers, cd)
		}
		for _, vol := range p.Spec.Volumes {
			local := volumemanager.IsLocalEphemeral(vol)
			if !local && vol.EmptyDir == nil {
				continue
			}
			if v, err := d.DirUsage(d.VolumeDir(p, vol.Name)); err == nil {
				du.volumes = append(du.volumes, volumeDisk{name: vol.Name, local: local, usage: v})
			}
		}
		out[p] = du
	}
	return out
}

// containerIDs are the pod's container IDs by container name.
func containerIDs(pod *v1.Pod) map[string]string {
	out := map[string]string{}
	for _, st := range statuses(pod) {
		out[st.Name] = strings.TrimPrefix(st.ContainerID, "containerd://")
	}
	return out
}

// total is the pod's use of res (bytes or inodes) over the measured parts.
func (u diskUsage) total(what fsStats, res v1.ResourceName) int64 {
	pick := func(d *runtime.DiskUsage) int64 {
		if d == nil {
			return 0
		}
		if res == resourceInodes {
			return int64(d.Inodes)
		}
		return int64(d.Bytes)
	}
	var sum int64
	for _, c := range u.containers {
		if what.rootfs {
			sum += pick(c.rootfs)
		}
		if what.logs {
			sum += pick(c.logs)
		}
	}
	if what.volumes {
		for _, v := range u.volumes {
			if v.local {
				sum += pick(&v.usage)
			}
		}
	}
	return sum
}

// storageRequest is the pod's effective ephemeral-storage request.
func storageRequest(pod *v1.Pod) int64 {
	q := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	return q.Value()
}

// rankDisk orders pods for eviction under disk pressure as the kubelet's
// rankDiskPressureFunc: pods without stats first, then those using more
// than they request (inodes are never requested), then lower priority,
// then larger use above the ephemeral-storage request (the kubelet
// subtracts that request from inode counts too).
func rankDisk(pods []*v1.Pod, stats map[*v1.Pod]diskUsage, what fsStats, res v1.ResourceName) {
	keys := make(map[*v1.Pod]rankKey, len(pods))
	for _, p := range pods {
		u, ok := stats[p]
		used := u.total(what, res)
		var request int64
		if res == v1.ResourceEphemeralStorage {
			request = storageRequest(p)
		}
		keys[p] = rankKey{noStats: !ok, exceeds: ok && used > request, above: used - storageRequest(p)}
	}
	rank(pods, keys)
}

// diskOffenders are the containers whose writable layer and logs together
// exceed their ephemeral-storage request, as the kubelet names them.
func diskOffenders(pod *v1.Pod, u diskUsage) (names, used []string, text string) {
	requests := containerRequests(pod, v1.ResourceEphemeralStorage)
	var b strings.Builder
	for _, c := range u.containers {
		req, ok := requests[c.name]
		if !ok || c.rootfs == nil || c.logs == nil {
			continue
		}
		q := resource.NewQuantity(int64(c.rootfs.Bytes+c.logs.Bytes), resource.BinarySI)
		if q.Cmp(req) > 0 {
			b.WriteString(containerMessage(c.name, q, req, v1.ResourceEphemeralStorage))
			names = append(names, c.name)
			used = append(used, q.String())
		}
	}
	return names, used, b.String()
}

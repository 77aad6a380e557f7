package eviction

import (
	"context"
	"fmt"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/node"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
)

// hasStorageLimit: a pod the kubelet's local storage eviction can act on,
// one with an ephemeral-storage limit or an emptyDir sizeLimit. Only these
// are looked at every round.
func hasStorageLimit(pod *v1.Pod) bool {
	if _, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]; ok {
		return true
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Sign() == 1 {
			return true
		}
	}
	return false
}

// localStorageEviction is the kubelet's (LocalStorageCapacityIsolation,
// locked on): every pod over an emptyDir's sizeLimit, its containers'
// total ephemeral-storage limit, or one container's limit is evicted, at
// once and whatever the node's thresholds. It returns a channel closed
// once all of them have stopped, or nil when none was evicted.
func (m *Manager) localStorageEviction(ctx context.Context, pods []*v1.Pod) <-chan struct{} {
	var limited []*v1.Pod
	for _, p := range pods {
		if hasStorageLimit(p) {
			limited = append(limited, p)
		}
	}
	if len(limited) == 0 {
		return nil
	}
	samples, err := m.stats.ContainerStats(ctx)
	if err != nil {
		log.WithError(err).Error("eviction manager: failed to get container stats")
		return nil
	}
	stats := map[*v1.Pod]usage{}
	for _, p := range limited {
		if u, ok := podUsage(p, samples); ok {
			stats[p] = u
		}
	}
	if len(stats) == 0 {
		return nil
	}
	disk := measureDisk(ctx, m.stats, limited, stats)
	var stopped []<-chan struct{}
	for _, p := range limited {
		u, ok := disk[p]
		if !ok {
			continue
		}
		msg := storageLimitExceeded(p, u, m.dedicatedImageFs)
		if msg == "" {
			continue
		}
		if node.IsCriticalPod(p) {
			log.WithField("pod", cache.MetaObjectToName(p).String()).Error("eviction manager: cannot evict a critical pod")
			continue
		}
		m.event(p, nil, Reason, msg)
		log.WithFields(log.Fields{"pod": cache.MetaObjectToName(p).String(), "uid": p.UID, "message": msg}).Info("evicting pod")
		stopped = append(stopped, m.pods.StopPod(p.UID, lifecycle.StopRequest{Grace: immediateGrace, Reason: Reason, Message: msg}).Released)
	}
	if len(stopped) == 0 {
		return nil
	}
	all := make(chan struct{})
	go func() {
		defer close(all)
		for _, ch := range stopped {
			<-ch
		}
	}()
	return all
}

// storageLimitExceeded is the kubelet's message for the first of its local
// storage limits the pod exceeds, in its order, or "".
func storageLimitExceeded(pod *v1.Pod, u diskUsage, dedicatedImageFs bool) string {
	used := map[string]uint64{}
	for _, v := range u.volumes {
		used[v.name] = v.usage.Bytes
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() != 1 {
			continue
		}
		if b, ok := used[v.Name]; ok && resource.NewQuantity(int64(b), resource.BinarySI).Cmp(*v.EmptyDir.SizeLimit) > 0 {
			return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, v.EmptyDir.SizeLimit.String())
		}
	}
	if limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]; ok {
		// The kubelet's pod ephemeral storage: writable layers with their
		// logs, and local ephemeral volumes.
		var total int64
		for _, c := range u.containers {
			if c.rootfs != nil {
				total += int64(c.rootfs.Bytes)
				if c.logs != nil {
					total += int64(c.logs.Bytes)
				}
			}
		}
		for _, v := range u.volumes {
			if v.local {
				total += int64(v.usage.Bytes)
			}
		}
		if resource.NewQuantity(total, resource.BinarySI).Cmp(limit) > 0 {
			return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String())
		}
	}
	limits := map[string]resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && q.Value() != 0 {
			limits[c.Name] = q
		}
	}
	for _, c := range u.containers {
		limit, ok := limits[c.name]
		if !ok {
			continue
		}
		// With an image filesystem the writable layer is not on the
		// node's: only the logs count.
		var b int64
		if c.logs != nil {
			b = int64(c.logs.Bytes)
		}
		if !dedicatedImageFs && c.rootfs != nil {
			b += int64(c.rootfs.Bytes)
		}
		if limit.Cmp(*resource.NewQuantity(b, resource.BinarySI)) < 0 {
			return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.name, limit.String())
		}
	}
	return ""
}

package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// sweepInterval is how often leftovers of vanished pods are looked for.
const sweepInterval = 5 * time.Minute

// SweepOrphans removes, once the pod cache is synced and then every few
// minutes, what hostlet made for pods that exist neither in the API nor as
// a worker: containers, sandboxes, cgroups, volumes and logs left by a
// crash in the middle of a deletion or by pods removed while hostlet was
// down.
func (p *Provider) SweepOrphans(ctx context.Context, pods corelisters.PodLister, synced func() bool) {
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return
	}
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		p.sweep(ctx, pods)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Provider) sweep(ctx context.Context, pods corelisters.PodLister) {
	// Workers first, then the API: a worker whose pod the API no longer has
	// was deleted there (a missed or early delete) and is stopped by UID,
	// not skipped.
	p.mu.Lock()
	workers := make(map[types.UID]*v1.Pod, len(p.pods))
	for uid, e := range p.pods {
		workers[uid] = e.worker.Object()
	}
	p.mu.Unlock()
	list, err := pods.List(labels.Everything())
	if err != nil {
		return
	}
	inAPI := map[types.UID]bool{}
	for _, pod := range list {
		inAPI[pod.UID] = true
	}
	for uid, pod := range workers {
		if !inAPI[uid] {
			lifecycle.PodLogger(pod).Info("pod is gone from the API; stopping it")
			_ = p.RemovePod(ctx, pod)
		}
	}
	p.releaseTerminal(ctx, list, workers)

	// What exists on the host is listed before the workers are read again:
	// a pod's worker is registered before it creates anything, so whatever
	// a pod admitted during the listing made is known, not an orphan.
	type ref struct{ namespace, name string }
	orphans := map[types.UID]ref{}
	containers, err := p.rt.ListContainers(ctx, "")
	if err != nil {
		return
	}
	dirs, _ := os.ReadDir(volumes.NewLayout(p.cfg.RootDir).PodsDir())
	// Pod cgroups too, as the kubelet's cleanupOrphanedPodCgroups: a pod
	// removed while hostlet was down leaves its cgroup (and whatever still
	// runs in it), whose processes the cleanup kills before removing it.
	cgroupPods, err := p.rt.PodCgroupUIDs()
	if err != nil {
		log.WithError(err).Warn("listing pod cgroups")
	}
	// Pods' log directories, "<namespace>_<name>_<uid>": under
	// --pod-logs-dir, or under the root dir for pods a hostlet of before
	// that flag started.
	logDirs := []string{filepath.Join(p.cfg.RootDir, "logs")}
	if p.cfg.PodLogsDir != "" {
		logDirs = append(logDirs, p.cfg.PodLogsDir)
	}
	podLogs := map[types.UID]string{}
	for _, d := range logDirs {
		es, _ := os.ReadDir(d)
		for _, e := range es {
			if i := strings.LastIndexByte(e.Name(), '_'); i > 0 && strings.Count(e.Name(), "_") == 2 {
				podLogs[types.UID(e.Name()[i+1:])] = e.Name()
			}
		}
	}
	known := inAPI
	p.mu.Lock()
	for uid := range p.pods {
		known[uid] = true
	}
	p.mu.Unlock()
	ours := func(logPath string) bool {
		for _, d := range logDirs {
			if strings.HasPrefix(logPath, d+string(filepath.Separator)) {
				return true
			}
		}
		return false
	}
	for _, c := range containers {
		// Another hostlet sharing the containerd namespace (nodes on one
		// host, as in the e2e tests) owns containers logging elsewhere.
		if !ours(c.LogPath) {
			continue
		}
		if uid := types.UID(c.PodUID); !known[uid] {
			orphans[uid] = ref{}
		}
	}
	for _, d := range dirs {
		if uid := types.UID(d.Name()); !known[uid] {
			orphans[uid] = ref{}
		}
	}
	for _, uid := range cgroupPods {
		if !known[types.UID(uid)] {
			orphans[types.UID(uid)] = ref{}
		}
	}
	// A log directory alone is a leftover too, as the kubelet's container
	// GC removes the log directories of pods it no longer has.
	for uid := range podLogs {
		if !known[uid] {
			orphans[uid] = ref{}
		}
	}
	for uid := range orphans {
		// The log directory carries the namespace and name.
		ns, name := "", ""
		if d, ok := podLogs[uid]; ok {
			ns, name = splitLogDir(d, string(uid))
		}
		log.WithFields(log.Fields{"uid": uid, "pod": key(ns, name)}).Info("removing leftovers of a pod that no longer exists")
		p.cleanupHost(string(uid), ns, name)
	}
}

// releaseTerminal frees what the pods that ended and have no worker hold
// on the host, once each: a restarted hostlet does not run them again
// (admit skips pods in a terminal phase), so what their worker did not
// release before the restart is released here, as the kubelet's pod
// workers finish a terminated pod they find at startup.
func (p *Provider) releaseTerminal(ctx context.Context, list []*v1.Pod, workers map[types.UID]*v1.Pod) {
	if p.releasedTerminal == nil {
		p.releasedTerminal = map[types.UID]bool{}
	}
	inAPI := make(map[types.UID]bool, len(list))
	for _, pod := range list {
		inAPI[pod.UID] = true
		if !podEnded(pod) || pod.DeletionTimestamp != nil || workers[pod.UID] != nil || p.releasedTerminal[pod.UID] {
			continue
		}
		// A worker that finished meanwhile: its cleanup is under way.
		p.mu.Lock()
		_, done := p.gone[pod.UID]
		p.mu.Unlock()
		if done {
			continue
		}
		p.releasedTerminal[pod.UID] = true
		p.host.ReleasePod(ctx, pod)
	}
	for uid := range p.releasedTerminal {
		if !inAPI[uid] {
			delete(p.releasedTerminal, uid)
		}
	}
}

// splitLogDir reads "<namespace>_<name>_<uid>".
func splitLogDir(dir, uid string) (string, string) {
	rest := dir[:len(dir)-len(uid)-1]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '_' {
			return rest[:i], rest[i+1:]
		}
	}
	return "", ""
}

package provider

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/staticpod"
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

// SweepOrphans removes, as soon as synced says the pods of pods are all
// known (and handed to the node: podsync.Controller.HasSynced) and then
// every few minutes, what hostlet made for pods that exist neither in the
// API nor as a worker: containers, sandboxes, cgroups, volumes and logs
// left by a crash in the middle of a deletion or by pods removed while
// hostlet was down; and it releases the ended pods it finds. Later
// removals are RemovePod's at once; the periodic sweep catches what a
// failed cleanup left.
func (p *Provider) SweepOrphans(ctx context.Context, pods corelisters.PodLister, synced func() bool) {
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return
	}
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	p.sweep(ctx, pods)
	log.Info(firstSweepDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.sweep(ctx, pods)
	}
}

// firstSweepDone is logged once the first sweep after start is done.
const firstSweepDone = "pods on the host checked against the API: leftovers removed, ended pods released"

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
		// A static pod is the node's own, never in the API (its mirror
		// has a UID of its own): only its source removes it.
		if !inAPI[uid] && !staticpod.IsStatic(pod) {
			lifecycle.PodLogger(pod).Info("pod is gone from the API; stopping it")
			_ = p.RemovePod(ctx, pod)
		}
	}
	p.releaseTerminal(ctx, list, workers)

	// What exists on the host is listed before the workers are read again:
	// a pod's worker is registered before it creates anything, so whatever
	// a pod admitted during the listing made is known, not an orphan.
	found, err := p.hostPods(ctx)
	if err != nil {
		log.WithError(err).Warn("listing the pods on the host")
		return
	}
	known := inAPI
	p.mu.Lock()
	for uid := range p.pods {
		known[uid] = true
	}
	p.mu.Unlock()
	for uid, ref := range found {
		if known[uid] {
			continue
		}
		log.WithFields(log.Fields{"uid": uid, "pod": key(ref.namespace, ref.name)}).Info("removing leftovers of a pod that no longer exists")
		if p.tearingDown(uid) {
			continue // its retries are under way
		}
		// Once here; what resists (a volume that does not unmount) is
		// retried with back-off until it goes, with an event on the pod.
		if err := p.host.Cleanup(context.WithoutCancel(ctx), string(uid), ref.namespace, ref.name); err != nil {
			p.tearDownInBackground(uid, ref.namespace, ref.name)
		}
	}
	if n := p.rt.RemoveDeadLogLinks(ctx); n > 0 {
		log.WithField("links", n).Info("removed container log symlinks whose log file is gone")
	}
}

// podRef is a pod found on the host: its namespace and name when its log
// directory tells them, else empty.
type podRef struct{ namespace, name string }

// hostPods are the pods this hostlet left something of on the host: a
// container, a pod directory, a pod cgroup or a log directory.
func (p *Provider) hostPods(ctx context.Context) (map[types.UID]podRef, error) {
	containers, err := p.rt.ListContainers(ctx, "")
	if err != nil {
		return nil, err
	}
	found := map[types.UID]podRef{}
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
		if ours(c.LogPath) {
			found[types.UID(c.PodUID)] = podRef{}
		}
	}
	for _, d := range dirs {
		found[types.UID(d.Name())] = podRef{}
	}
	for _, uid := range cgroupPods {
		found[types.UID(uid)] = podRef{}
	}
	// A log directory alone is a leftover too, as the kubelet's container
	// GC removes the log directories of pods it no longer has; it carries
	// the namespace and name.
	for _, d := range logDirs {
		es, _ := os.ReadDir(d)
		for _, e := range es {
			if i := strings.LastIndexByte(e.Name(), '_'); i > 0 && strings.Count(e.Name(), "_") == 2 {
				uid := e.Name()[i+1:]
				ns, name := splitLogDir(e.Name(), uid)
				found[types.UID(uid)] = podRef{namespace: ns, name: name}
			}
		}
	}
	return found, nil
}

// CleanupAll removes what this hostlet made on the host for every pod it
// finds there, running or not: `hostlet leave` runs it once hostlet is
// stopped and the Node deleted, when none of them is wanted any more
// (DaemonSet pods, which a drain leaves, and cleanups a stop cut short
// included). It returns the pods still found afterwards.
func (p *Provider) CleanupAll(ctx context.Context) ([]string, error) {
	found, err := p.hostPods(ctx)
	if err != nil {
		return nil, err
	}
	for uid, ref := range found {
		log.WithFields(log.Fields{"uid": uid, "pod": key(ref.namespace, ref.name)}).Info("removing what the pod left on the host")
		p.host.Cleanup(ctx, string(uid), ref.namespace, ref.name)
	}
	p.rt.RemoveDeadLogLinks(ctx)
	if found, err = p.hostPods(ctx); err != nil {
		return nil, err
	}
	left := make([]string, 0, len(found))
	for uid := range found {
		left = append(left, string(uid))
	}
	sort.Strings(left)
	return left, nil
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
		// A mirror pod runs nothing: its static pod is the worker.
		if staticpod.IsMirror(pod) || !podEnded(pod) || pod.DeletionTimestamp != nil || workers[pod.UID] != nil || p.releasedTerminal[pod.UID] {
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

// Package eviction is the kubelet's node-pressure eviction manager: when an
// eviction threshold is crossed (a soft one for its grace period), it
// reclaims what the node itself can free and, if that is not enough, ends
// one pod per round, ranked as the kubelet ranks them.
package eviction

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

const (
	// Reason is the pod status reason of an evicted pod.
	Reason = "Evicted"
	// immediateGrace is the kubelet's grace period under a hard threshold.
	immediateGrace = time.Second
	// cleanupTimeout is how long the kubelet waits for an evicted pod to be
	// stopped before it looks at the node again.
	cleanupTimeout = 30 * time.Second
)

// Config are the kubelet's eviction settings.
type Config struct {
	Hard, Soft node.Thresholds
	// SoftGrace is how long each soft threshold must be crossed before
	// pods are evicted for it (--eviction-soft-grace-period).
	SoftGrace map[string]time.Duration
	// MaxPodGrace caps a pod's termination grace period when a soft
	// threshold evicts it (--eviction-max-pod-grace-period).
	MaxPodGrace time.Duration
	// MinReclaim is, by signal, how far above its threshold the signal
	// must get back before the pressure counts as relieved
	// (--eviction-minimum-reclaim).
	MinReclaim node.Thresholds
	// PressureTransitionPeriod is how long a pressure condition stays on
	// after its threshold was last observed met
	// (--eviction-pressure-transition-period).
	PressureTransitionPeriod time.Duration
	// NoLocalStorageLimits is localStorageCapacityIsolation: false: pods
	// are not evicted over their ephemeral-storage limits or emptyDir
	// sizeLimits (node-level disk thresholds still apply), as the
	// kubelet's.
	NoLocalStorageLimits bool
}

// Signals reads the node's eviction signals (node.Node), and is told when
// the pressure conditions change so that the status shows them at once.
type Signals interface {
	Observe(ctx context.Context) node.Observations
	HasDedicatedImageFs(ctx context.Context) (bool, error)
	UpdateStatus()
}

// Pods are the node's running pods and the way to end one through its own
// lifecycle worker (provider.Provider).
type Pods interface {
	ActivePods() []*v1.Pod
	StopPod(uid types.UID, req lifecycle.StopRequest) lifecycle.Stopping
}

// Stats samples the containers' cgroups (runtime.Runtime) and measures
// the pods' local storage.
type Stats interface {
	ContainerStats(ctx context.Context) (map[string]runtime.ContainerStats, error)
	Disk
}

// Reclaim frees node-level resources (unused images, dead containers).
type Reclaim func(ctx context.Context) error

// Manager is the eviction manager.
type Manager struct {
	cfg                  Config
	signals              Signals
	pods                 Pods
	stats                Stats
	containerGC, imageGC Reclaim
	// reclaim lists, by signal, what the node can free before evicting;
	// nil until the image filesystem is known.
	reclaim          map[string][]Reclaim
	dedicatedImageFs bool
	events           record.EventRecorder
	nodeRef          *v1.ObjectReference
	clock            clock.WithTicker

	// firstMet is when each crossed threshold was first seen crossed,
	// keyed by signal and hard/soft.
	firstMet map[thresholdKey]time.Time
	// met are the thresholds acted on in the last round: they stay met
	// until their signal is above threshold and minimum reclaim.
	met []threshold

	// mu guards the node conditions, which the node's status reads.
	mu sync.Mutex
	// conditions are the pressure conditions on; conditionsLastObserved is
	// when each was last observed.
	conditions             map[v1.NodeConditionType]bool
	conditionsLastObserved map[v1.NodeConditionType]time.Time
}

type thresholdKey struct {
	signal string
	soft   bool
}

// threshold is a crossed threshold with its grace period.
type threshold struct {
	node.Threshold
	soft  bool
	grace time.Duration
}

// New makes the manager; containerGC and imageGC are the node-level
// reclaim of dead containers and unused images.
func New(cfg Config, signals Signals, pods Pods, stats Stats, containerGC, imageGC Reclaim, events record.EventRecorder, nodeRef *v1.ObjectReference, clk clock.WithTicker) *Manager {
	return &Manager{cfg: cfg, signals: signals, pods: pods, stats: stats, containerGC: containerGC, imageGC: imageGC,
		events: events, nodeRef: nodeRef, clock: clk, firstMet: map[thresholdKey]time.Time{},
		conditions: map[v1.NodeConditionType]bool{}, conditionsLastObserved: map[v1.NodeConditionType]time.Time{}}
}

// diskReclaim is the kubelet's node-level reclaim for the disk signals:
// dead containers, then unused images, under pressure of the filesystem
// holding them; with a dedicated image filesystem, nodefs pressure
// reclaims nothing this way.
func diskReclaim(dedicatedImageFs bool, containers, images Reclaim) map[string][]Reclaim {
	both := []Reclaim{containers, images}
	out := map[string][]Reclaim{node.SignalImageFsAvailable: both, node.SignalImageFsInodesFree: both}
	if !dedicatedImageFs {
		out[node.SignalNodeFsAvailable], out[node.SignalNodeFsInodesFree] = both, both
	}
	return out
}

// Run synchronizes every interval (the kubelet's housekeeping period),
// and after an eviction as soon as the evicted pod has stopped.
// It runs without thresholds too: local storage limits are enforced
// regardless.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	log.Info("eviction manager: starting control loop")
	for {
		wait := interval
		if stopped := m.synchronize(ctx); stopped != nil {
			m.waitStopped(ctx, stopped)
			wait = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(wait):
		}
	}
}

// waitStopped waits for an evicted pod to stop, at most cleanupTimeout.
func (m *Manager) waitStopped(ctx context.Context, stopped <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-stopped:
	case <-m.clock.After(cleanupTimeout):
		log.Info("eviction manager: timed out waiting for the evicted pod to stop")
	}
}

// crossed lists the thresholds the observations cross, hard and soft.
func (m *Manager) crossed(obs node.Observations) []threshold {
	var out []threshold
	for _, t := range m.cfg.Hard.Met(obs) {
		out = append(out, threshold{Threshold: t})
	}
	for _, t := range m.cfg.Soft.Met(obs) {
		out = append(out, threshold{Threshold: t, soft: true, grace: m.cfg.SoftGrace[t.Signal]})
	}
	return out
}

// unresolved is the kubelet's thresholdsMet with enforceMinReclaim: those
// of ts whose signal is not yet above threshold plus minimum reclaim.
func (m *Manager) unresolved(ts []threshold, obs node.Observations) []threshold {
	var out []threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		limit := t.Value(o.Capacity)
		if r, ok := m.cfg.MinReclaim[t.Signal]; ok {
			limit += r.Value(o.Capacity)
		}
		if o.Available < limit {
			out = append(out, t)
		}
	}
	return out
}

// all are the configured thresholds, hard and soft, crossed or not.
func (m *Manager) all() []threshold {
	var out []threshold
	for _, t := range m.cfg.Hard {
		out = append(out, threshold{Threshold: t})
	}
	for _, t := range m.cfg.Soft {
		out = append(out, threshold{Threshold: t, soft: true, grace: m.cfg.SoftGrace[t.Signal]})
	}
	return out
}

// merge adds to crossed those of more it does not hold yet.
func merge(crossed, more []threshold) []threshold {
	seen := map[thresholdKey]bool{}
	for _, t := range crossed {
		seen[thresholdKey{t.Signal, t.soft}] = true
	}
	for _, t := range more {
		if k := (thresholdKey{t.Signal, t.soft}); !seen[k] {
			seen[k] = true
			crossed = append(crossed, t)
		}
	}
	return crossed
}

// synchronize is one round of the kubelet's eviction control loop; it
// returns the stop channel of the pod it evicted, or nil.
func (m *Manager) synchronize(ctx context.Context) <-chan struct{} {
	if m.reclaim == nil {
		dedicated, err := m.signals.HasDedicatedImageFs(ctx)
		if err != nil {
			log.WithError(err).Error("eviction manager: failed to get HasDedicatedImageFs")
			return nil
		}
		m.reclaim = diskReclaim(dedicated, m.containerGC, m.imageGC)
		m.dedicatedImageFs = dedicated
	}
	// One observation per round drives both eviction and the node's
	// pressure conditions, as the kubelet's synchronize.
	obs := m.signals.Observe(ctx)
	now := m.clock.Now()
	// Crossed now, or acted on before and not yet relieved by the minimum
	// reclaim.
	crossed := merge(m.crossed(obs), m.unresolved(m.met, obs))
	if m.observeConditions(nodeConditions(crossed), now) {
		m.signals.UpdateStatus()
	}
	first := map[thresholdKey]time.Time{}
	var due []threshold
	for _, t := range crossed {
		k := thresholdKey{t.Signal, t.soft}
		at, ok := m.firstMet[k]
		if !ok {
			at = now
		}
		first[k] = at
		if now.Sub(at) >= t.grace {
			due = append(due, t)
		} else {
			log.WithFields(log.Fields{"signal": t.Signal, "duration": now.Sub(at)}).Debug("eviction manager: eviction criteria not yet met")
		}
	}
	m.firstMet = first
	m.met = due
	// Pods over their own local storage limits go first, pressure or not.
	if !m.cfg.NoLocalStorageLimits {
		if stopped := m.localStorageEviction(ctx, m.activePods()); stopped != nil {
			return stopped
		}
	}
	if len(due) == 0 {
		return nil
	}
	// Memory first (the node's or the pods' cgroup's), then the signals
	// the kubelet can reclaim.
	sort.SliceStable(due, func(i, j int) bool {
		return isMemorySignal(due[i].Signal) && !isMemorySignal(due[j].Signal)
	})
	var t threshold
	var res v1.ResourceName
	for _, c := range due {
		if r, ok := signalResource[c.Signal]; ok {
			t, res = c, r
			break
		}
	}
	if res == "" {
		return nil
	}
	log.WithField("resourceName", res).Info("eviction manager: attempting to reclaim")
	m.event(m.nodeRef, nil, "EvictionThresholdMet", fmt.Sprintf("Attempting to reclaim %s", res))
	if m.reclaimNodeLevel(ctx, t.Signal, res) {
		log.WithField("resourceName", res).Info("eviction manager: able to reduce resource pressure without evicting pods.")
		return nil
	}
	log.WithField("resourceName", res).Info("eviction manager: must evict pod(s) to reclaim")
	pods := m.activePods()
	if len(pods) == 0 {
		log.Error("eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil
	}
	stats := map[*v1.Pod]usage{}
	if samples, err := m.stats.ContainerStats(ctx); err != nil {
		log.WithError(err).Error("eviction manager: failed to get container stats")
		return nil
	} else {
		for _, p := range pods {
			if u, ok := podUsage(p, samples); ok {
				stats[p] = u
			}
		}
	}
	var disk map[*v1.Pod]diskUsage
	switch t.Signal {
	case node.SignalMemoryAvailable, node.SignalAllocatableMemoryAvailable:
		rankMemory(pods, stats)
	case node.SignalPIDAvailable:
		rankPriority(pods)
	default:
		disk = measureDisk(ctx, m.stats, pods, stats)
		rankDisk(pods, disk, diskStatsFor(t.Signal, m.dedicatedImageFs), res)
	}
	for _, p := range pods {
		if stopped := m.evict(p, t, res, stats, disk, obs, due); stopped != nil {
			return stopped
		}
	}
	log.Info("eviction manager: unable to evict any pods from the node")
	return nil
}

// activePods are the node's active pods not already on their way out.
func (m *Manager) activePods() []*v1.Pod {
	var pods []*v1.Pod
	for _, p := range m.pods.ActivePods() {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	return pods
}

// reclaimNodeLevel runs the signal's node-level reclaim and reports whether
// every signal is above its thresholds and their minimum reclaim.
func (m *Manager) reclaimNodeLevel(ctx context.Context, signal string, res v1.ResourceName) bool {
	funcs := m.reclaim[signal]
	if len(funcs) == 0 {
		return false
	}
	for _, f := range funcs {
		if err := f(ctx); err != nil {
			log.WithError(err).WithField("resourceName", res).Info("eviction manager: unexpected error when attempting to reduce resource pressure")
		}
	}
	return len(m.unresolved(m.all(), m.signals.Observe(ctx))) == 0
}

// evict ends the pod Failed with the kubelet's reason, message and
// DisruptionTarget condition through its lifecycle worker; a critical pod
// is spared (nil).
func (m *Manager) evict(pod *v1.Pod, t threshold, res v1.ResourceName, stats map[*v1.Pod]usage, disk map[*v1.Pod]diskUsage, obs node.Observations, due []threshold) <-chan struct{} {
	logger := log.WithFields(log.Fields{"pod": cache.MetaObjectToName(pod).String(), "uid": pod.UID})
	if node.IsCriticalPod(pod) {
		logger.Error("eviction manager: cannot evict a critical pod")
		return nil
	}
	grace := immediateGrace
	if t.soft {
		grace = m.cfg.MaxPodGrace
		if tgp := pod.Spec.TerminationGracePeriodSeconds; tgp != nil && time.Duration(*tgp)*time.Second < grace {
			grace = time.Duration(*tgp) * time.Second
		}
	}
	msg, annotations := message(res, pod, stats, disk, due, obs)
	m.event(pod, annotations, Reason, msg)
	logger.WithField("message", msg).Info("evicting pod")
	return m.pods.StopPod(pod.UID, lifecycle.StopRequest{
		Grace: grace, Reason: Reason, Message: msg,
		Conditions: []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, ObservedGeneration: pod.Generation,
			Reason: v1.PodReasonTerminationByKubelet, Message: msg,
		}},
	}).Released
}

func (m *Manager) event(obj apiruntime.Object, annotations map[string]string, reason, msg string) {
	if m.events != nil {
		m.events.AnnotatedEventf(obj, annotations, v1.EventTypeWarning, reason, "%s", msg)
	}
}

func isMemorySignal(signal string) bool {
	return signal == node.SignalMemoryAvailable || signal == node.SignalAllocatableMemoryAvailable
}

package provider

import (
	"context"
	"sync"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/staticpod"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

type podEntry struct {
	worker *lifecycle.Pod
	cancel context.CancelFunc
	// seen is when the node first saw the pod; running, once it was
	// Running (kubelet_pod_start_duration_seconds).
	seen    time.Time
	running bool
}

// goneTTL is how long the UID of a finished pod is remembered, so late
// events about it (an informer update racing the final delete) do not start
// its termination over.
const goneTTL = 10 * time.Minute

// Registry is the pods the provider runs. It is made before the provider,
// so that what the provider runs pods through (podspec, podcerts) can read
// it, and no late binding closes that loop.
type Registry struct {
	// Pods are identified by UID: a pod recreated under a reused name is a
	// new pod with its own worker while the old one finishes its teardown.
	// byName points at the newest incarnation of each name.
	mu     sync.Mutex
	pods   map[types.UID]*podEntry
	byName map[string]types.UID
	gone   map[types.UID]time.Time
	// ranBefore are the final statuses of static pods that ended by their
	// manifest's removal, for a run of the same UID soon after (see
	// lifecycle.Config.Previous).
	ranBefore map[types.UID]previousRun
}

// previousRun is a static pod's final status and when it ended.
type previousRun struct {
	status v1.PodStatus
	at     time.Time
}

// previousRunTTL is how long a static pod's earlier run counts: the
// kubelet's dead containers, which carry it, go at its container GC's
// next run, a minute apart.
const previousRunTTL = time.Minute

// NewRegistry makes an empty registry, for Config.Registry.
func NewRegistry() *Registry {
	return &Registry{pods: map[types.UID]*podEntry{}, byName: map[string]types.UID{}, gone: map[types.UID]time.Time{},
		ranBefore: map[types.UID]previousRun{}}
}

// ActivePods returns the pods the node runs that have not finished.
func (p *Registry) ActivePods() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admittedPods()
}

// ActivePodsAndUIDs returns ActivePods and the UIDs of every pod with a
// worker, finished or not, from one look at the registry. The QoS cgroups
// are recounted at every pod's start; asked one UID at a time, a burst's
// workers queued on the registry's lock.
func (p *Registry) ActivePodsAndUIDs() ([]*v1.Pod, map[types.UID]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	uids := make(map[types.UID]bool, len(p.pods))
	for uid := range p.pods {
		uids[uid] = true
	}
	return p.admittedPods(), uids
}

// Pod returns the newest object of a pod the node runs, or nil.
func (p *Registry) Pod(uid types.UID) *v1.Pod {
	e := p.entry(uid)
	if e == nil {
		return nil
	}
	return e.worker.Object()
}

// admission is what admit decided: a worker known already, a rejection, a
// new worker to start, or nothing (the pod finished already).
type admission struct {
	known, started *lifecycle.Pod
	ctx            context.Context
	rejected       *lifecycle.Failure
}

// admit registers a new worker for the pod unless the node rejects it. The
// lock is released however admission ends, a panic included.
func (p *Provider) admit(pod *v1.Pod) admission {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pods[pod.UID]; ok {
		return admission{known: e.worker}
	}
	if _, done := p.gone[pod.UID]; done && !staticpod.IsStatic(pod) {
		// Finished and removed already; a late event must not restart it.
		// (A static pod comes from its source only, never late: its
		// manifest put back after its removal runs it again, as the
		// kubelet restarts a static pod of the same UID.)
		return admission{}
	}
	if podEnded(pod) && pod.DeletionTimestamp == nil {
		// It ended before a restart of hostlet and its volumes may be gone:
		// it never runs again (the sweep releases what it left).
		return admission{}
	}
	l := lifecycle.PodLogger(pod)
	alloc := p.allocation(pod)
	// A pod already being deleted (hostlet restarted during its termination)
	// is not admitted again: its worker adopts and finishes it.
	if pod.DeletionTimestamp == nil {
		// Admitted with what it was given before a restart of hostlet, not
		// a resize not admitted yet.
		admitted, _ := alloc.Apply(pod)
		if reason, msg, ok := p.node.Admit(admitted, p.admittedPods()); !ok {
			l.WithFields(log.Fields{"reason": reason, "message": msg}).Info("pod rejected")
			return admission{rejected: &lifecycle.Failure{Reason: reason, Message: msg}}
		}
		l.Info("pod admitted")
	} else {
		l.Info("resuming the termination of a pod")
	}
	wctx, cancel := context.WithCancel(p.ctx)
	cfg := lifecycle.Config{
		Runtime:    guardedRuntime{p.host, pod},
		Recorder:   p.events,
		Backoff:    p.cfg.Backoff,
		HostIPs:    p.cfg.NodeIPs,
		Publish:    p.publish,
		Terminated: p.terminated,
		Released:   p.released,
		Prober:     p.prober,
		Allocator:  allocator{p, pod.UID},
	}
	if prev, ok := p.ranBefore[pod.UID]; ok {
		delete(p.ranBefore, pod.UID)
		if time.Since(prev.at) <= previousRunTTL {
			cfg.Previous = &prev.status
		}
	}
	if p.cfg.TracerProvider != nil {
		cfg.Tracer = p.cfg.TracerProvider.Tracer(instrumentationScope)
	}
	if vm, ok := p.host.(volumeMountReporter); ok {
		cfg.VolumeMounts = func(pod *v1.Pod, c *v1.Container) []v1.VolumeMountStatus {
			return vm.VolumeMountStatuses(wctx, pod, c)
		}
	}
	w := lifecycle.NewPod(pod, cfg)
	if w.Admitted(alloc) {
		p.pushResize(pod.UID)
	}
	p.pods[pod.UID] = &podEntry{worker: w, cancel: cancel, seen: time.Now(), running: pod.Status.Phase == v1.PodRunning}
	p.byName[key(pod.Namespace, pod.Name)] = pod.UID
	return admission{started: w, ctx: wctx}
}

// volumeMountReporter gives containers' status.volumeMounts
// (podspec.Runtime).
type volumeMountReporter interface {
	VolumeMountStatuses(ctx context.Context, pod *v1.Pod, c *v1.Container) []v1.VolumeMountStatus
}

// markGone remembers a pod whose host cleanup is done or under way, and
// forgets those that ended more than goneTTL ago. Called with mu.
func (p *Provider) markGone(uid types.UID) {
	now := time.Now()
	for u, at := range p.gone {
		if now.Sub(at) > goneTTL {
			delete(p.gone, u)
		}
	}
	p.gone[uid] = now
	for u, prev := range p.ranBefore {
		if now.Sub(prev.at) > previousRunTTL {
			delete(p.ranBefore, u)
		}
	}
}

// entry is the registered worker of a pod, or nil.
func (p *Registry) entry(uid types.UID) *podEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[uid]
}

// admittedPods lists the pods this node runs, for admission: every pod
// admitted and not finished, counted from the moment of its admission (its
// spec, before its worker's first status), as the kubelet counts them.
// Called with mu.
func (p *Registry) admittedPods() []*v1.Pod {
	out := make([]*v1.Pod, 0, len(p.pods))
	for _, e := range p.pods {
		pod := e.worker.Allocated()
		if lifecycle.Terminal(pod.Status.Phase) {
			continue
		}
		out = append(out, pod)
	}
	return out
}

// current returns the newest incarnation of a name, unless the API already
// holds a newer one this provider has not been given yet: the kubelet API
// asks by name, and an old incarnation still terminating must never stand
// in for the new pod.
// Called with mu.
func (p *Provider) current(namespace, name string) (types.UID, *podEntry) {
	uid, ok := p.byName[key(namespace, name)]
	if !ok {
		return "", nil
	}
	if p.lister != nil {
		if api, err := p.lister.Pods(namespace).Get(name); err == nil && !staticpod.SamePod(api, uid) {
			return "", nil
		}
	}
	return uid, p.pods[uid]
}

// view is what the provider reports of a pod: its computed status, or the
// object as admitted before its worker's first status (so that a deletion
// reaches it however early it comes).
func view(e *podEntry) *v1.Pod {
	if s := e.worker.Status(); s != nil {
		return s.DeepCopy()
	}
	return e.worker.Object().DeepCopy()
}

// Package provider is hostlet's virtual-kubelet provider: it turns pods bound
// to this node into lifecycle workers, reports their status, and serves the
// node object and the kubelet API.
package provider

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/probes"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Config is what the provider needs: the node's facts and, explicitly, the
// parts it drives.
type Config struct {
	NodeIPs []string
	RootDir string
	Backoff lifecycle.Backoff
	// Client writes pod statuses and removes finished pods.
	Client     kubernetes.Interface
	Containers Containers
	Host       Host
	Events     lifecycle.Recorder
	Node       Node
}

// Containers is what the provider uses of the container runtime
// (runtime.Runtime) itself: exits, logs, and what exists for the sweep.
type Containers interface {
	ResumeLogs(ctx context.Context)
	WatchExits(ctx context.Context, onExit func(runtime.ContainerStatus))
	ListContainers(ctx context.Context, podUID string) ([]runtime.ContainerStatus, error)
}

// Host runs pods on this host as their specs say (podspec.Runtime): the
// lifecycle's runtime, and what the registry asks of it beyond that.
type Host interface {
	lifecycle.Runtime
	ContainerInfo(pod *v1.Pod, st runtime.ContainerStatus) lifecycle.ContainerInfo
	PodUpdated(old, pod *v1.Pod)
	Cleanup(ctx context.Context, uid, namespace, name string)
}

type podEntry struct {
	worker *lifecycle.Pod
	cancel context.CancelFunc
}

// goneTTL is how long the UID of a finished pod is remembered, so late
// events about it (an informer update racing the final delete) do not start
// its termination over.
const goneTTL = 10 * time.Minute

// Node admits pods (node.Node).
type Node interface {
	Admit(pod *v1.Pod, running []*v1.Pod) (reason, msg string, ok bool)
}

// Provider implements virtual-kubelet's PodLifecycleHandler and PodNotifier.
type Provider struct {
	cfg    Config
	ctx    context.Context
	client kubernetes.Interface
	rt     Containers
	host   Host
	events lifecycle.Recorder
	node   Node
	prober *probes.Prober

	// Pods are identified by UID: a pod recreated under a reused name is a
	// new pod with its own worker while the old one finishes its teardown.
	// byName points at the newest incarnation of each name.
	mu     sync.Mutex
	pods   map[types.UID]*podEntry
	byName map[string]types.UID
	gone   map[types.UID]time.Time
	notify func(*v1.Pod)
	// lister is the node's pod informer cache: the API's view of which
	// incarnation of a name is current.
	lister corelisters.PodLister
}

// New creates the provider; Run must be called before pods arrive.
func New(ctx context.Context, cfg Config) *Provider {
	return &Provider{
		cfg: cfg, ctx: ctx, client: cfg.Client, rt: cfg.Containers, host: cfg.Host, events: cfg.Events, node: cfg.Node,
		pods: map[types.UID]*podEntry{}, byName: map[string]types.UID{}, gone: map[types.UID]time.Time{},
		prober: probes.NewProber(),
	}
}

// Run listens for container exits until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	p.rt.ResumeLogs(ctx)
	p.rt.WatchExits(ctx, func(st runtime.ContainerStatus) {
		if e := p.entry(types.UID(st.PodUID)); e != nil {
			e.worker.Exited(p.host.ContainerInfo(p.Pod(types.UID(st.PodUID)), st))
		}
	})
}

func key(ns, name string) string { return ns + "/" + name }

// Pod returns the newest object of a pod the node runs, or nil.
func (p *Provider) Pod(uid types.UID) *v1.Pod {
	e := p.entry(uid)
	if e == nil {
		return nil
	}
	return e.worker.Object()
}

// CreatePod starts a worker for a pod bound to this node. A pod is known by
// its UID only: a new pod under the name of one still terminating gets a
// worker of its own at once.
func (p *Provider) CreatePod(ctx context.Context, pod *v1.Pod) (err error) {
	defer recoverSync(pod, "create", &err)
	a := p.admit(pod)
	switch {
	case a.known != nil:
		a.known.Update(pod)
	case a.rejected != nil:
		p.reject(ctx, pod, a.rejected.Reason, a.rejected.Message)
	case a.started != nil:
		go a.started.Supervise(a.ctx)
	}
	return nil
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
	if _, done := p.gone[pod.UID]; done {
		// Finished and removed already; a late event must not restart it.
		return admission{}
	}
	l := podLog(pod)
	// A pod already being deleted (hostlet restarted during its termination)
	// is not admitted again: its worker adopts and finishes it.
	if pod.DeletionTimestamp == nil {
		if reason, msg, ok := p.node.Admit(pod, p.admittedPods()); !ok {
			l.WithFields(log.Fields{"reason": reason, "message": msg}).Info("pod rejected")
			return admission{rejected: &lifecycle.Failure{Reason: reason, Message: msg}}
		}
		l.Info("pod admitted")
	} else {
		l.Info("resuming the termination of a pod")
	}
	wctx, cancel := context.WithCancel(p.ctx)
	w := lifecycle.NewPod(pod, lifecycle.Config{
		Runtime:    guardedRuntime{p.host, pod},
		Recorder:   p.events,
		Backoff:    p.cfg.Backoff,
		HostIPs:    p.cfg.NodeIPs,
		Publish:    p.publish,
		Terminated: p.terminated,
		Prober:     p.prober,
	})
	p.pods[pod.UID] = &podEntry{worker: w, cancel: cancel}
	p.byName[key(pod.Namespace, pod.Name)] = pod.UID
	return admission{started: w, ctx: wctx}
}

// entry is the registered worker of a pod, or nil.
func (p *Provider) entry(uid types.UID) *podEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[uid]
}

// podLog is the logger of one pod's story.
func podLog(pod *v1.Pod) *log.Entry {
	return log.WithFields(log.Fields{"pod": key(pod.Namespace, pod.Name), "uid": string(pod.UID)})
}

// admittedPods lists the pods this node runs, for admission: every pod
// admitted and not finished, counted from the moment of its admission (its
// spec, before its worker's first status), as the kubelet counts them.
// Called with mu.
func (p *Provider) admittedPods() []*v1.Pod {
	out := make([]*v1.Pod, 0, len(p.pods))
	for _, e := range p.pods {
		pod := e.worker.Status()
		if pod == nil {
			pod = e.worker.Object()
		}
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		out = append(out, pod)
	}
	return out
}

// reject fails a pod the node does not admit, without running anything.
func (p *Provider) reject(ctx context.Context, pod *v1.Pod, reason, msg string) {
	p.events.Event(pod, "", v1.EventTypeWarning, reason, msg)
	err := p.updateStatus(ctx, pod, func(st *v1.PodStatus) {
		st.Phase, st.Reason, st.Message = v1.PodFailed, reason, msg
	})
	if err != nil && !podGone(err) {
		podLog(pod).WithError(err).Warn("rejecting pod")
	}
}

// podGone tells an expected answer about a pod already removed from the
// API: NotFound, or Forbidden, which is what the Node authorizer answers a
// node for a pod no longer bound to it.
func podGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// updateStatus changes the status of the pod's current object (the same
// UID only), retrying on conflicts.
func (p *Provider) updateStatus(ctx context.Context, pod *v1.Pod, change func(*v1.PodStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := p.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil
		}
		change(&cur.Status)
		_, err = p.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (p *Provider) UpdatePod(ctx context.Context, pod *v1.Pod) (err error) {
	defer recoverSync(pod, "update", &err)
	e := p.entry(pod.UID)
	if e == nil {
		return p.CreatePod(ctx, pod)
	}
	p.host.PodUpdated(e.worker.Status(), pod)
	e.worker.Update(pod)
	return nil
}

// DeletePod starts the termination of a pod, however early it comes: the
// worker is found by UID, and interrupts what it is doing. A pod already
// gone from the API (force deletion) is stopped at once.
func (p *Provider) DeletePod(ctx context.Context, pod *v1.Pod) (err error) {
	defer recoverSync(pod, "delete", &err)
	p.mu.Lock()
	e := p.pods[pod.UID]
	_, done := p.gone[pod.UID]
	p.mu.Unlock()
	if done {
		return nil
	}
	if e == nil {
		if pod.DeletionTimestamp != nil {
			// Still in the API, being deleted, and unknown to this hostlet: it
			// restarted during the termination, which resumes with the grace
			// period left, as the kubelet's does.
			return p.CreatePod(ctx, pod)
		}
		go p.cleanupHost(string(pod.UID), pod.Namespace, pod.Name)
		return nil
	}
	if pod.DeletionTimestamp == nil {
		pod = pod.DeepCopy()
		now := metav1.Now()
		zero := int64(0)
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, &zero
	}
	e.worker.Update(pod)
	return nil
}

// current returns the newest incarnation of a name, unless the API already
// holds a newer one this provider has not been given yet: virtual-kubelet
// compares what GetPod returns with the API's pod by name only, and an old
// incarnation still terminating must never stand in for the new pod.
// Called with mu.
func (p *Provider) current(namespace, name string) (types.UID, *podEntry) {
	uid, ok := p.byName[key(namespace, name)]
	if !ok {
		return "", nil
	}
	if p.lister != nil {
		if api, err := p.lister.Pods(namespace).Get(name); err == nil && api.UID != uid {
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

func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	p.mu.Lock()
	_, e := p.current(namespace, name)
	p.mu.Unlock()
	if e == nil {
		return nil, errdefs.NotFoundf("pod %s/%s not found", namespace, name)
	}
	return view(e), nil
}

func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*v1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the current incarnation of every name the node runs.
func (p *Provider) GetPods(ctx context.Context) ([]*v1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*v1.Pod, 0, len(p.byName))
	for k := range p.byName {
		ns, name, _ := strings.Cut(k, "/")
		if _, e := p.current(ns, name); e != nil {
			out = append(out, view(e))
		}
	}
	return out, nil
}

// NotifyPods registers virtual-kubelet's status callback.
func (p *Provider) NotifyPods(ctx context.Context, cb func(*v1.Pod)) {
	p.mu.Lock()
	p.notify = cb
	p.mu.Unlock()
}

// publish hands a pod's new status to virtual-kubelet, which writes it by
// namespace/name: only while that name is this incarnation in the API. An
// old incarnation's status would land on its successor, and one of a pod
// gone from the API would only keep virtual-kubelet waiting for it; the
// final status of a deleted pod is written by terminated, by UID.
func (p *Provider) publish(pod *v1.Pod) {
	p.mu.Lock()
	cb := p.notify
	uid, _ := p.current(pod.Namespace, pod.Name)
	lister := p.lister
	p.mu.Unlock()
	if cb == nil || uid != pod.UID {
		return
	}
	if lister != nil {
		if api, err := lister.Pods(pod.Namespace).Get(pod.Name); err != nil || api.UID != pod.UID {
			return
		}
	}
	cb(pod)
}

// terminated writes a deleted pod's terminal status, removes the object with
// grace 0 (as the kubelet does once everything stopped) and cleans the host.
func (p *Provider) terminated(pod *v1.Pod) {
	ctx := p.ctx
	l := podLog(pod)
	l.WithField("phase", pod.Status.Phase).Info("pod terminated")
	err := p.updateStatus(ctx, pod, func(cur *v1.PodStatus) {
		st := pod.Status.DeepCopy()
		st.Conditions = lifecycle.MergeConditions(ownedOnly(st.Conditions), cur.Conditions, metav1.Now())
		*cur = *st
	})
	if podGone(err) {
		l.WithError(err).Debug("terminal status not written: the pod is already gone")
	} else if err != nil {
		l.WithError(err).Warn("writing terminal pod status")
	}
	zero := int64(0)
	err = p.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !podGone(err) && !apierrors.IsConflict(err) {
		l.WithError(err).Warn("deleting pod")
	}
	p.mu.Lock()
	if e := p.pods[pod.UID]; e != nil {
		e.cancel()
		delete(p.pods, pod.UID)
	}
	if p.byName[key(pod.Namespace, pod.Name)] == pod.UID {
		delete(p.byName, key(pod.Namespace, pod.Name))
	}
	now := time.Now()
	for uid, at := range p.gone {
		if now.Sub(at) > goneTTL {
			delete(p.gone, uid)
		}
	}
	p.gone[pod.UID] = now
	p.mu.Unlock()
	p.cleanupHost(string(pod.UID), pod.Namespace, pod.Name)
	l.Info("pod cleaned up on the host")
}

// cleanupHost removes everything hostlet made for a pod, to the end
// whatever happens to the provider's context.
func (p *Provider) cleanupHost(uid, namespace, name string) {
	p.host.Cleanup(context.WithoutCancel(p.ctx), uid, namespace, name)
}

func ownedOnly(cs []v1.PodCondition) []v1.PodCondition {
	var out []v1.PodCondition
	for _, c := range cs {
		if lifecycle.IsOwnedCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// ActivePods returns the pods the node runs that have not finished.
func (p *Provider) ActivePods() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admittedPods()
}

// StopPod ends a pod Failed without deleting it (node shutdown); the channel
// is closed once its containers stopped and the status was published.
func (p *Provider) StopPod(uid types.UID, req lifecycle.StopRequest) <-chan struct{} {
	e := p.entry(uid)
	if e == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return e.worker.Stop(req)
}

// WatchPods hands every change of a running pod's object to its worker,
// status included: virtual-kubelet passes on spec and metadata changes
// only, but conditions written by others (readiness gates) change Ready.
// A pod removed from the API is stopped by UID, whatever virtual-kubelet's
// name-keyed queue makes of a name reused meanwhile.
func (p *Provider) WatchPods(informer cache.SharedIndexInformer) error {
	p.mu.Lock()
	p.lister = corelisters.NewPodLister(informer.GetIndexer())
	p.mu.Unlock()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return
			}
			if e := p.entry(pod.UID); e != nil {
				e.worker.Update(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return
			}
			if e := p.entry(pod.UID); e != nil {
				_ = p.DeletePod(p.ctx, pod)
			}
		},
	})
	return err
}

// Package provider runs the pods bound to this node: it keeps them in a
// registry by UID, runs each as a lifecycle worker, and hands their
// statuses to be written. podsync hands it the API's pod events; the node,
// the pod spec translation and the kubelet API are the packages node,
// podspec and server below it.
package provider

import (
	"context"
	"strings"
	"sync"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/probes"
	"github.com/hostlet/hostlet/runtime"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
)

// Config is what the provider needs: the node's facts and, explicitly, the
// parts it drives.
type Config struct {
	NodeIPs []string
	RootDir string
	// PodLogsDir holds the pods' log directories (--pod-logs-dir); the
	// sweep finds leftovers there too.
	PodLogsDir string
	Backoff    lifecycle.Backoff
	// Client writes pod statuses and removes finished pods.
	Client kubernetes.Interface
	// Statuses writes the statuses the workers compute (podsync.Statuses).
	Statuses Statuses
	// Pods is the node's pod informer cache, the API's view of which
	// incarnation of a name is current; PodsSynced tells when it is full.
	Pods       corelisters.PodLister
	PodsSynced func() bool
	Containers Containers
	Host       Host
	Events     lifecycle.Recorder
	Node       Node
	// Registry holds the pods the provider runs; made before it (by
	// NewRegistry) for the parts it runs pods through that read it (the
	// pod spec translation), else a new one.
	Registry *Registry
	// TracerProvider, if set, traces the pod workers' syncs (the kubelet's
	// syncPod spans); nil traces nothing.
	TracerProvider trace.TracerProvider
	// Clock times the retries of a pod's volume teardown (real if nil).
	Clock clock.Clock
}

// instrumentationScope names the pod workers' tracer, as the kubelet's
// "k8s.io/kubernetes/pkg/kubelet".
const instrumentationScope = "github.com/hostlet/hostlet/provider"

// Containers is what the provider uses of the container runtime
// (runtime.Runtime) itself: exits, logs, and what exists for the sweep.
type Containers interface {
	ResumeLogs(ctx context.Context)
	WatchExits(ctx context.Context, onExit func(runtime.ContainerStatus))
	ListContainers(ctx context.Context, podUID string) ([]runtime.ContainerStatus, error)
	// PodCgroupUIDs lists the pods that have a cgroup (the sweep's).
	PodCgroupUIDs() ([]string, error)
	// RemoveDeadLogLinks removes the container log symlinks whose log
	// file is gone (the sweep's).
	RemoveDeadLogLinks(ctx context.Context) int
}

// Host runs pods on this host as their specs say (podspec.Runtime): the
// lifecycle's runtime, and what the registry asks of it beyond that.
type Host interface {
	lifecycle.Runtime
	ContainerInfo(pod *v1.Pod, st runtime.ContainerStatus) lifecycle.ContainerInfo
	PodUpdated(old, pod *v1.Pod)
	// Cleanup removes a pod's containers, sandbox, volumes and logs; an
	// error means some of its volumes are not torn down yet (to retry).
	Cleanup(ctx context.Context, uid, namespace, name string) error
	// ReleasePod frees what a pod that ended holds on the host (volumes,
	// sandbox, cgroup), keeping its containers for their logs.
	ReleasePod(ctx context.Context, pod *v1.Pod)
	// SaveAllocation and LoadAllocation keep what the node admitted for a
	// pod's containers across restarts of hostlet.
	SaveAllocation(uid types.UID, a lifecycle.Allocation) error
	LoadAllocation(uid types.UID) (lifecycle.Allocation, bool)
}

// Statuses takes a pod's newest status (a copy of the pod with it) to write.
type Statuses interface {
	Set(pod *v1.Pod)
	// WaitWritten returns once the newest status Set for the pod is in
	// the API or the pod is gone from it.
	WaitWritten(ctx context.Context, uid types.UID) error
}

// Node admits pods (node.Node).
type Node interface {
	Admit(pod *v1.Pod, running []*v1.Pod) (reason, msg string, ok bool)
	// AdmitResize is whether a running pod's resize fits (reason
	// Infeasible or Deferred when not), for its worker's decision.
	AdmitResize(pod *v1.Pod, others []*v1.Pod) (reason, msg string, ok bool)
	// PodsToPreempt chooses the running pods a critical pod may preempt
	// to fit (an error if none would do).
	PodsToPreempt(pod *v1.Pod, running []*v1.Pod) ([]*v1.Pod, error)
	// MissingFeaturesForUpdate names the declared node features an
	// update of a pod needs that the node lacks ("" when none).
	MissingFeaturesForUpdate(old, pod *v1.Pod) string
}

// Provider runs the node's pods (podsync.Pods).
type Provider struct {
	cfg    Config
	ctx    context.Context
	client kubernetes.Interface
	rt     Containers
	host   Host
	events lifecycle.Recorder
	node   Node
	prober *probes.Prober

	// The registry's mu guards the provider's fields below too.
	*Registry
	// resizes are the pods whose resize waits for room; resizesReady is
	// set once every pod of the node is known again (resize.go).
	resizes      []types.UID
	resizesReady bool
	podsSynced   func() bool
	statuses     Statuses
	// lister is the node's pod informer cache: the API's view of which
	// incarnation of a name is current.
	lister corelisters.PodLister
	// cleanups are the host cleanups RemovePod started.
	cleanups sync.WaitGroup
	// releasedTerminal are the pods that ended without a worker whose
	// leftovers the sweep released (sweep.go); owned by the sweep.
	releasedTerminal map[types.UID]bool
	clock            clock.Clock
	// teardowns are the pods whose host teardown is under way, closed
	// once it is done (teardown.go).
	teardownMu sync.Mutex
	teardowns  map[types.UID]chan struct{}
}

// New creates the provider; Run must be called before pods arrive.
func New(ctx context.Context, cfg Config) *Provider {
	reg := cfg.Registry
	if reg == nil {
		reg = NewRegistry()
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Provider{clock: clk, teardowns: map[types.UID]chan struct{}{},
		cfg: cfg, ctx: ctx, client: cfg.Client, rt: cfg.Containers, host: cfg.Host, events: cfg.Events, node: cfg.Node,
		Registry: reg,
		prober:   probes.NewProber(), statuses: cfg.Statuses, lister: cfg.Pods, podsSynced: cfg.PodsSynced,
	}
}

// Run listens for container exits until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	p.rt.ResumeLogs(ctx)
	go p.retryResizesPeriodically(ctx)
	p.rt.WatchExits(ctx, p.ContainerExited)
}

func key(ns, name string) string { return ns + "/" + name }

// SyncPod hands a pod's newest API object to the node. A pod is known by
// its UID only: a new pod under the name of one still terminating gets a
// worker of its own at once, and a known pod's worker takes every change,
// its status included (conditions written by others change Ready); a
// deletionTimestamp starts its termination, however early it comes.
func (p *Provider) SyncPod(ctx context.Context, pod *v1.Pod) (err error) {
	defer recoverSync(pod, "sync", &err)
	e := p.entry(pod.UID)
	if e == nil {
		p.createPod(ctx, pod.DeepCopy())
		return nil
	}
	old := e.worker.Status()
	if missing := p.node.MissingFeaturesForUpdate(old, pod); missing != "" {
		// As the kubelet: a warning; the update goes on.
		lifecycle.PodLogger(pod).WithField("missingFeatures", missing).Error("pod requires node features that are not available")
		p.events.Event(pod, "", v1.EventTypeWarning, "FailedNodeDeclaredFeaturesCheck", "Pod requires node features that are not available: "+missing)
	}
	p.host.PodUpdated(old, pod)
	e.worker.Update(pod)
	if e.worker.ResizeRequested(pod) {
		p.resizeRequested(pod.UID)
	}
	return nil
}

// createPod starts a worker for a pod new to the node, unless the node
// rejects it or it finished already. A pod already being deleted (hostlet
// restarted during its termination) gets a worker that resumes the
// termination with the grace period left, as the kubelet's does.
func (p *Provider) createPod(ctx context.Context, pod *v1.Pod) {
	a := p.admit(pod)
	if a.rejected != nil && p.preemptFor(pod, a.rejected) {
		a = p.admit(pod)
	}
	switch {
	case a.known != nil:
		a.known.Update(pod)
	case a.rejected != nil:
		p.reject(pod, a.rejected.Reason, a.rejected.Message)
	case a.started != nil:
		go a.started.Supervise(a.ctx)
		p.retryResizes()
	}
}

// RemovePod stops a pod removed from the API (force deletion) at once,
// whatever its worker is doing; pod is its final object. A pod without a
// worker never ran here or ended before hostlet restarted: the API removes
// an ended pod with grace 0, and when the update setting its
// deletionTimestamp is not handled before the removal (podsync coalesces
// them, a relist sees the removal only), no worker resumes its
// termination. What it left on the host (its containers, kept for their
// logs, pod directory, logs) is removed now, as the kubelet's pod cleanup
// does, not at the next orphan sweep minutes later.
func (p *Provider) RemovePod(ctx context.Context, pod *v1.Pod) (err error) {
	defer recoverSync(pod, "remove", &err)
	p.mu.Lock()
	e := p.pods[pod.UID]
	_, cleaned := p.gone[pod.UID]
	if e == nil && !cleaned {
		p.markGone(pod.UID)
	}
	p.mu.Unlock()
	if e == nil {
		if !cleaned {
			lifecycle.PodLogger(pod).Info("pod without a worker removed from the API; cleaning up what it left on the host")
			// On a goroutine of its own, as a worker's cleanup: a burst of
			// removals (a Job's ended pods) does not hold podsync's workers.
			p.cleanups.Add(1)
			go func() {
				defer p.cleanups.Done()
				// A panic in the cleanup costs this pod's cleanup (the
				// sweep retries it), not the node.
				defer crash.Recover(lifecycle.PodLogger(pod), nil)
				_ = p.tearDown(p.ctx, pod.UID, pod.Namespace, pod.Name)
			}()
		}
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

func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	p.mu.Lock()
	_, e := p.current(namespace, name)
	lister := p.lister
	p.mu.Unlock()
	if e == nil {
		// A pod that ended before hostlet restarted has no worker; as on
		// the kubelet, its logs are still served, from its final status.
		if lister != nil {
			if pod, err := lister.Pods(namespace).Get(name); err == nil && podEnded(pod) {
				return pod.DeepCopy(), nil
			}
		}
		return nil, errdefs.NotFoundf("pod %s/%s not found", namespace, name)
	}
	return view(e), nil
}

// podEnded: the pod is in a terminal phase, which it never leaves.
func podEnded(pod *v1.Pod) bool {
	return lifecycle.Terminal(pod.Status.Phase)
}

// GetPodByUID returns one incarnation of a pod the node runs, with its
// status, whether or not its name has been reused since.
func (p *Provider) GetPodByUID(ctx context.Context, uid types.UID) (*v1.Pod, error) {
	e := p.entry(uid)
	if e == nil {
		return nil, errdefs.NotFoundf("pod with UID %s not found", uid)
	}
	return view(e), nil
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

// released frees what a pod that ended without being deleted holds on the
// host, as the kubelet's SyncTerminatedPod, on its worker: an evicted pod's
// emptyDir no longer holds the node's disk until the pod is deleted.
func (p *Provider) released(pod *v1.Pod) {
	p.host.ReleasePod(context.WithoutCancel(p.ctx), pod)
}

// Done is closed once the node has finished the pod of this UID and
// cleaned up after it: at once if it runs no such pod.
func (p *Provider) Done(uid types.UID) <-chan struct{} {
	if e := p.entry(uid); e != nil {
		return e.worker.Done()
	}
	done := make(chan struct{})
	close(done)
	return done
}

// StopPod ends a pod Failed without deleting it (node shutdown, eviction,
// preemption); Stopping tells when it ended and when it was released, at
// once for a pod the node does not run.
func (p *Provider) StopPod(uid types.UID, req lifecycle.StopRequest) lifecycle.Stopping {
	e := p.entry(uid)
	if e == nil {
		done := make(chan struct{})
		close(done)
		return lifecycle.Stopping{Ended: done, Released: done}
	}
	return e.worker.Stop(req)
}

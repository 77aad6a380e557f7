package staticpod

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Pods runs the node's pods (provider.Provider): the same path the API's
// pods take, so that a static pod is admitted, run, probed and stopped as
// any other.
type Pods interface {
	// SyncPod hands the node a pod's newest object; one with a
	// deletionTimestamp is terminated within its grace period.
	SyncPod(ctx context.Context, pod *v1.Pod) error
	// Done is closed once the pod's worker has finished it and cleaned
	// up the host (at once for a pod the node does not run).
	Done(uid types.UID) <-chan struct{}
}

// Statuses is the status manager (podsync.Statuses), which writes a static
// pod's statuses to its mirror pod.
type Statuses interface {
	// Forget drops what is kept of a pod that is gone.
	Forget(uid types.UID)
}

// Config says where the static pods come from and what the manager uses.
type Config struct {
	NodeName string
	// ManifestPath is a file or directory of manifests (--pod-manifest-path),
	// listed every FileCheckFrequency and watched in between.
	ManifestPath       string
	FileCheckFrequency time.Duration
	// ManifestURL serves a pod or a PodList (--manifest-url), fetched with
	// ManifestURLHeader every HTTPCheckFrequency.
	ManifestURL        string
	ManifestURLHeader  http.Header
	HTTPCheckFrequency time.Duration
	// Client creates and deletes mirror pods.
	Client kubernetes.Interface
	// PodInformer is the node's pod informer (its mirror pods among them);
	// NodeInformer the node's own Node, whose UID mirror pods are owned by.
	PodInformer  cache.SharedIndexInformer
	NodeInformer cache.SharedIndexInformer
	Statuses     Statuses
	Clock        clock.WithTicker
}

// Manager runs the static pods of the configured sources on the node and
// keeps their mirror pods in the API. Per full name one static pod runs at
// a time: one replaced by an edit is terminated (gracefully, within its
// grace period) before the new one starts, as the kubelet's pod workers
// order them. Static pods are this node's own: the API never removes them
// (podsync does not hand them over, the orphan sweep skips them).
type Manager struct {
	cfg     Config
	pods    Pods
	lister  corelisters.PodLister
	nodes   corelisters.NodeLister
	queue   workqueue.TypedRateLimitingInterface[string]
	sources []string

	mu sync.Mutex
	// desired is each source's newest set; synced the sources that sent one.
	desired map[string][]*v1.Pod
	synced  map[string]bool
	// seen is when each pod was first seen (config.seen).
	seen map[types.UID]string
	// want is the pod to run for each namespace/name, active the one the
	// node runs (or terminates).
	want   map[string]*v1.Pod
	active map[string]*activePod
	// nodeUID is the Node's UID last seen.
	nodeUID types.UID
}

type activePod struct {
	pod         *v1.Pod
	terminating bool
}

// New makes the manager; Run starts it. Enabled tells whether any source
// is configured.
func New(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m := &Manager{cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "static-pods"}),
		desired: map[string][]*v1.Pod{}, synced: map[string]bool{}, seen: map[types.UID]string{},
		want: map[string]*v1.Pod{}, active: map[string]*activePod{},
	}
	if cfg.ManifestPath != "" {
		m.sources = append(m.sources, FileSource)
	}
	if cfg.ManifestURL != "" {
		m.sources = append(m.sources, HTTPSource)
	}
	if cfg.PodInformer != nil {
		m.lister = corelisters.NewPodLister(cfg.PodInformer.GetIndexer())
	}
	if cfg.NodeInformer != nil {
		m.nodes = corelisters.NewNodeLister(cfg.NodeInformer.GetIndexer())
	}
	return m
}

// Enabled tells whether static pods are configured.
func (m *Manager) Enabled() bool { return len(m.sources) > 0 }

// HasSynced tells when every source has sent its pods once and each of them
// was handed to the node: from then on a pod the node runs that is neither
// in the API nor static is a leftover (the orphan sweep waits for it).
func (m *Manager) HasSynced() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.sourcesSynced() {
		return false
	}
	for k := range m.want {
		if m.active[k] == nil {
			return false
		}
	}
	return true
}

// ActivePods are the static pods handed to the node and not yet done
// (terminating ones included: they hold what they were given until then).
// It takes no lock of the node's: admission asks it (through the device
// manager's active pods) while holding its own.
func (m *Manager) ActivePods() []*v1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*v1.Pod, 0, len(m.active))
	for _, a := range m.active {
		out = append(out, a.pod)
	}
	return out
}

// sourcesSynced: every source sent its set once. Called with mu.
func (m *Manager) sourcesSynced() bool {
	for _, s := range m.sources {
		if !m.synced[s] {
			return false
		}
	}
	return true
}

// Run reads the sources and runs their pods through pods until ctx ends.
// It needs neither the API server nor the informers' sync: static pods
// start at once; their mirrors follow when the API is there.
func (m *Manager) Run(ctx context.Context, pods Pods) {
	if !m.Enabled() {
		return
	}
	m.pods = pods
	updates := make(chan update)
	if m.cfg.ManifestPath != "" {
		go newFileSource(m.cfg.ManifestPath, m.cfg.NodeName, m.cfg.FileCheckFrequency, m.cfg.Clock).run(ctx, updates)
	}
	if m.cfg.ManifestURL != "" {
		s := &urlSource{url: m.cfg.ManifestURL, header: m.cfg.ManifestURLHeader, nodeName: m.cfg.NodeName,
			period: m.cfg.HTTPCheckFrequency, clock: m.cfg.Clock, client: &http.Client{Timeout: 10 * time.Second}}
		go s.run(ctx, updates)
	}
	m.watchAPI(ctx)
	go func() {
		<-ctx.Done()
		m.queue.ShutDown()
	}()
	go m.work(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			m.apply(u)
		}
	}
}

// watchAPI queues the static pods whose mirrors the API changed, and all
// of them when the Node (re)appears or the caches fill.
func (m *Manager) watchAPI(ctx context.Context) {
	if m.cfg.PodInformer != nil {
		_, _ = m.cfg.PodInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { m.podEvent(obj) },
			UpdateFunc: func(_, obj any) {
				// A mirror deleted by hand shows as a deletionTimestamp
				// first; its status updates (ours) need nothing.
				if pod, ok := obj.(*v1.Pod); ok && pod.DeletionTimestamp != nil {
					m.podEvent(obj)
				}
			},
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				m.podEvent(obj)
			},
		})
	}
	if m.cfg.NodeInformer != nil {
		_, _ = m.cfg.NodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    m.nodeEvent,
			UpdateFunc: func(_, obj any) { m.nodeEvent(obj) },
		})
	}
	if m.cfg.PodInformer != nil && m.cfg.NodeInformer != nil {
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), m.cfg.PodInformer.HasSynced, m.cfg.NodeInformer.HasSynced) {
				m.queueAll()
			}
		}()
	}
}

func (m *Manager) podEvent(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	k := key(pod.Namespace, pod.Name)
	m.mu.Lock()
	known := m.want[k] != nil || m.active[k] != nil
	m.mu.Unlock()
	if known || IsMirror(pod) {
		m.queue.Add(k)
	}
}

func (m *Manager) nodeEvent(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok || node.Name != m.cfg.NodeName {
		return
	}
	m.mu.Lock()
	changed := node.UID != m.nodeUID
	m.nodeUID = node.UID
	m.mu.Unlock()
	if changed {
		m.queueAll()
	}
}

func key(ns, name string) string { return ns + "/" + name }

// queueAll queues every static pod and every mirror pod of the node.
func (m *Manager) queueAll() {
	m.mu.Lock()
	keys := map[string]bool{}
	for k := range m.want {
		keys[k] = true
	}
	for k := range m.active {
		keys[k] = true
	}
	m.mu.Unlock()
	if m.lister != nil {
		all, _ := m.lister.List(labels.Everything())
		for _, p := range all {
			if IsMirror(p) {
				keys[key(p.Namespace, p.Name)] = true
			}
		}
	}
	for k := range keys {
		m.queue.Add(k)
	}
}

// apply takes a source's new set.
func (m *Manager) apply(u update) {
	now := m.cfg.Clock.Now().UTC().Format(time.RFC3339Nano)
	m.mu.Lock()
	wasSynced := m.sourcesSynced()
	pods := make([]*v1.Pod, 0, len(u.pods))
	for _, p := range u.pods {
		p = p.DeepCopy()
		if m.seen[p.UID] == "" {
			m.seen[p.UID] = now
		}
		p.Annotations[ConfigFirstSeenAnnotation] = m.seen[p.UID]
		pods = append(pods, p)
	}
	m.desired[u.source], m.synced[u.source] = pods, true
	want, dups := merge(m.sources, m.desired)
	for _, d := range dups {
		log.WithFields(log.Fields{"pod": key(d.Namespace, d.Name), "source": d.Annotations[ConfigSourceAnnotation]}).
			Warn("static pod has a duplicate full name; ignoring it")
	}
	keys := map[string]bool{}
	for k := range m.want {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	m.want = want
	// Forget the first-seen times of pods no source has any more.
	inSources := map[types.UID]bool{}
	for _, ps := range m.desired {
		for _, p := range ps {
			inSources[p.UID] = true
		}
	}
	for uid := range m.seen {
		if !inSources[uid] {
			delete(m.seen, uid)
		}
	}
	nowSynced := m.sourcesSynced()
	m.mu.Unlock()
	if nowSynced && !wasSynced {
		// Mirrors without a static pod can be told apart now.
		m.queueAll()
	}
	for k := range keys {
		m.queue.Add(k)
	}
}

// merge is the pods to run by namespace/name over the sources, in their
// order, and the pods left out for a full name already taken (the
// kubelet's filterInvalidPods).
func merge(sources []string, desired map[string][]*v1.Pod) (map[string]*v1.Pod, []*v1.Pod) {
	want := map[string]*v1.Pod{}
	var dups []*v1.Pod
	for _, s := range sources {
		for _, p := range desired[s] {
			k := key(p.Namespace, p.Name)
			if _, taken := want[k]; taken {
				dups = append(dups, p)
				continue
			}
			want[k] = p
		}
	}
	return want, dups
}

func (m *Manager) work(ctx context.Context) {
	for {
		k, quit := m.queue.Get()
		if quit {
			return
		}
		err := m.syncRecovered(ctx, k)
		if err != nil {
			log.WithError(err).WithField("pod", k).Warn("static pod: retrying")
			m.queue.AddRateLimited(k)
		} else {
			m.queue.Forget(k)
		}
		m.queue.Done(k)
	}
}

// syncRecovered is sync with a panic turned into its error: a bug costs the
// pod a retry, not the node.
func (m *Manager) syncRecovered(ctx context.Context, k string) (err error) {
	defer func() {
		crash.Handle(recover(), log.WithField("pod", k), func(msg string) {
			err = fmt.Errorf("panic while syncing a static pod: %s", msg)
		})
	}()
	return m.sync(ctx, k)
}

// sync brings one full name to what the sources want: the pod no longer
// wanted (removed or edited) is terminated and, once it is gone, the wanted
// one started; then its mirror pod is made to match.
func (m *Manager) sync(ctx context.Context, k string) error {
	m.mu.Lock()
	want, act := m.want[k], m.active[k]
	if act != nil && (want == nil || want.UID != act.pod.UID) && !act.terminating {
		act.terminating = true
		m.mu.Unlock()
		m.terminate(ctx, k, act)
		m.mu.Lock()
	}
	start := act == nil && want != nil
	if start {
		act = &activePod{pod: want}
		m.active[k] = act
	}
	terminating := act != nil && act.terminating
	m.mu.Unlock()
	if start {
		logger(want).Info("static pod handed to the node")
		if err := m.pods.SyncPod(ctx, want); err != nil {
			logger(want).WithError(err).Warn("static pod not handed to the node")
		}
	}
	if terminating {
		// The mirror stays with the pod that terminates (its final status
		// goes there) until it is gone.
		return nil
	}
	var pod *v1.Pod
	if act != nil {
		pod = act.pod
	}
	return m.syncMirror(ctx, k, pod)
}

// terminate stops a static pod no longer wanted within its grace period,
// as the kubelet does a pod removed from its source; once it is gone the
// name is synced again (its successor starts, or its mirror goes).
func (m *Manager) terminate(ctx context.Context, k string, act *activePod) {
	pod := act.pod.DeepCopy()
	now := metav1.NewTime(m.cfg.Clock.Now())
	pod.DeletionTimestamp = &now
	grace := int64(v1.DefaultTerminationGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	pod.DeletionGracePeriodSeconds = &grace
	logger(pod).WithField("grace", grace).Info("static pod removed from its source; terminating it")
	done := m.pods.Done(pod.UID)
	select {
	case <-done:
		// The node does not run it (it was not admitted): nothing to stop.
	default:
		if err := m.pods.SyncPod(ctx, pod); err != nil {
			logger(pod).WithError(err).Warn("static pod termination not handed to the node")
		}
	}
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
		m.mu.Lock()
		if m.active[k] == act {
			delete(m.active, k)
		}
		m.mu.Unlock()
		if m.cfg.Statuses != nil {
			m.cfg.Statuses.Forget(pod.UID)
		}
		logger(pod).Info("static pod terminated")
		m.queue.Add(k)
	}()
}

// syncMirror makes the mirror pod of name k match pod, the static pod that
// runs (nil: none): created when missing (once the Node is registered),
// recreated when deleted by hand or of another pod's hash, deleted when no
// static pod has the name. Nothing is done before the pod cache is full.
func (m *Manager) syncMirror(ctx context.Context, k string, pod *v1.Pod) error {
	if m.lister == nil || m.cfg.Client == nil || !m.cfg.PodInformer.HasSynced() {
		return nil
	}
	ns, name, _ := strings.Cut(k, "/")
	mirror, err := m.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		mirror = nil
	} else if err != nil {
		return err
	}
	if mirror != nil && !IsMirror(mirror) {
		if pod != nil {
			logger(pod).Warn("an API pod that is not a mirror pod has the static pod's name; no mirror pod for it")
		}
		return nil
	}
	if pod == nil {
		m.mu.Lock()
		synced := m.sourcesSynced()
		m.mu.Unlock()
		if mirror != nil && synced {
			log.WithField("pod", k).Info("deleting the mirror pod of a static pod no longer there")
			return m.deleteMirror(ctx, mirror)
		}
		return nil
	}
	if mirror != nil && (mirror.DeletionTimestamp != nil || !MirrorOf(mirror, pod.UID)) {
		logger(pod).WithField("mirror", mirror.UID).Info("deleting an outdated mirror pod")
		if err := m.deleteMirror(ctx, mirror); err != nil {
			return err
		}
		mirror = nil
	}
	if mirror != nil {
		return nil
	}
	node, err := m.nodes.Get(m.cfg.NodeName)
	if apierrors.IsNotFound(err) {
		// The Node's arrival queues every static pod again.
		logger(pod).Debug("node not registered yet; mirror pod later")
		return nil
	} else if err != nil {
		return err
	}
	if node.UID == "" {
		return fmt.Errorf("UID unset for node %s", m.cfg.NodeName)
	}
	created, err := m.cfg.Client.CoreV1().Pods(ns).Create(ctx, Mirror(pod, node), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := m.cfg.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if gerr == nil && MirrorOf(cur, pod.UID) {
			return nil
		}
		// Another pod holds the name (a mirror being deleted): its
		// removal queues the name again.
		return err
	}
	if err != nil {
		return fmt.Errorf("creating the mirror pod: %w", err)
	}
	logger(pod).WithField("mirror", created.UID).Info("mirror pod created")
	return nil
}

// deleteMirror deletes a mirror pod at once, only if it is still the one
// seen (the kubelet's DeleteMirrorPod with its UID).
func (m *Manager) deleteMirror(ctx context.Context, mirror *v1.Pod) error {
	zero := int64(0)
	err := m.cfg.Client.CoreV1().Pods(mirror.Namespace).Delete(ctx, mirror.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(mirror.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the mirror pod: %w", err)
	}
	return nil
}

// Mirror is the mirror pod of a static pod, as the kubelet's mirror client
// makes it: the pod with its annotations and config.mirror (its hash), no
// UID of its own, owned by the Node (the NodeRestriction admission requires
// it).
func Mirror(pod *v1.Pod, node *v1.Node) *v1.Pod {
	mirror := pod.DeepCopy()
	mirror.UID, mirror.ResourceVersion = "", ""
	mirror.Annotations[ConfigMirrorAnnotation] = pod.Annotations[ConfigHashAnnotation]
	controller := true
	mirror.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &controller,
	}}
	mirror.Status = v1.PodStatus{}
	return mirror
}

func logger(pod *v1.Pod) *log.Entry {
	return log.WithFields(log.Fields{"pod": key(pod.Namespace, pod.Name), "uid": pod.UID, "static": true})
}

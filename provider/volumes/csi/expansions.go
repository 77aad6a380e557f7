package csi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// When online expansion runs: the kubelet looks at a mounted claim again
// only when it resyncs the pod (a minute); hostlet follows the claim. Each
// claim of a volume published on the node (writable: the kubelet resizes
// no read-only mount) is watched by name, as the kubelet's object cache
// watches a pod's secrets, and each change of it (the resizer's
// NodeResizePending last) queues the claim, whose volumes are then
// expanded as expand.go says. A failure is retried with the kubelet's
// operation back-off, not at the next resync.
//
// The Node authorizer lets a node only get claims: watching them needs
// list and watch granted to the nodes (the chart's rbac.volumeExpansion).
// Refused, the claim is looked at when its pod resyncs, as by the kubelet,
// and a watch is tried again for claims tracked after forbiddenRecheck.

const (
	// expandBackoffInitial and expandBackoffMax are the kubelet's
	// exponential back-off of a failed volume operation.
	expandBackoffInitial = 500 * time.Millisecond
	expandBackoffMax     = 2*time.Minute + 2*time.Second
	forbiddenRecheck     = 10 * time.Minute
)

type claimKey struct{ namespace, name string }

func (k claimKey) String() string { return k.namespace + "/" + k.name }

// claimUse is a pod's published volume of a claim.
type claimUse struct {
	pod    *v1.Pod
	v      volume
	target string
}

// claimWatch is one claim's informer.
type claimWatch struct {
	cancel context.CancelFunc
	store  cache.Store
	synced cache.InformerSynced
}

// expansions are the claims of the node's published volumes.
type expansions struct {
	mu      sync.Mutex
	ctx     context.Context // set once the worker runs: watches start then
	uses    map[claimKey]map[types.UID]claimUse
	watches map[claimKey]*claimWatch
	// sizes are the node's sizes of the volumes, by UniqueName.
	sizes map[v1.UniqueVolumeName]*volumeSize
	// forbiddenAt is when a claim's watch was last refused.
	forbiddenAt time.Time
	queue       workqueue.TypedRateLimitingInterface[claimKey]
}

func newExpansions() expansions {
	return expansions{uses: map[claimKey]map[types.UID]claimUse{}, watches: map[claimKey]*claimWatch{},
		sizes: map[v1.UniqueVolumeName]*volumeSize{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[claimKey](expandBackoffInitial, expandBackoffMax))}
}

// trackClaim records the pod's published volume of a claim, watches the
// claim if it is not watched yet, and queues it when it is new or not
// watched (the pod's resync is then what looks at it).
func (m *Manager) trackClaim(pod *v1.Pod, v volume, target string) {
	if v.pvc == "" || v.readOnly || v.pv == nil {
		return
	}
	e := &m.exp
	key := claimKey{pod.Namespace, v.pvc}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.uses[key] == nil {
		e.uses[key] = map[types.UID]claimUse{}
	}
	_, had := e.uses[key][pod.UID]
	e.uses[key][pod.UID] = claimUse{pod: pod, v: v, target: target}
	w := e.watches[key]
	if w == nil {
		w = m.watchClaimLocked(key)
	}
	if !had || w == nil {
		e.queue.Add(key)
	}
}

// untrackPod forgets the pod's claims: a claim no pod uses is no longer
// watched, and a volume no pod uses loses its size.
func (m *Manager) untrackPod(uid types.UID) {
	e := &m.exp
	e.mu.Lock()
	defer e.mu.Unlock()
	inUse := map[v1.UniqueVolumeName]bool{}
	for key, uses := range e.uses {
		delete(uses, uid)
		if len(uses) == 0 {
			delete(e.uses, key)
			if w := e.watches[key]; w != nil {
				w.cancel()
				delete(e.watches, key)
			}
		}
		for _, u := range uses {
			inUse[UniqueName(u.v.driver, u.v.handle)] = true
		}
	}
	for n := range e.sizes {
		if !inUse[n] {
			delete(e.sizes, n)
		}
	}
}

// watchClaimLocked starts the claim's informer (a field selector on its
// name), unless the worker is not running yet or a watch was refused
// lately; nil when not watched.
func (m *Manager) watchClaimLocked(key claimKey) *claimWatch {
	e := &m.exp
	if e.ctx == nil || m.cfg.Client == nil {
		return nil
	}
	if !e.forbiddenAt.IsZero() && m.clock.Since(e.forbiddenAt) < forbiddenRecheck {
		return nil
	}
	ctx, cancel := context.WithCancel(e.ctx)
	claims := m.cfg.Client.CoreV1().PersistentVolumeClaims(key.namespace)
	selector := fields.OneTermEqualSelector("metadata.name", key.name).String()
	refused := func(err error) {
		if apierrors.IsForbidden(err) {
			go m.watchRefused(key, err)
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			l, err := claims.List(ctx, o)
			refused(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			w, err := claims.Watch(ctx, o)
			refused(err)
			return w, err
		},
	}
	queue := func(any) { e.queue.Add(key) }
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, m.cfg.Client),
		ObjectType: &v1.PersistentVolumeClaim{},
		Handler:    cache.ResourceEventHandlerFuncs{AddFunc: queue, UpdateFunc: func(_, o any) { queue(o) }}})
	go ctrl.RunWithContext(ctx)
	w := &claimWatch{cancel: cancel, store: store, synced: ctrl.HasSynced}
	e.watches[key] = w
	return w
}

// watchRefused stops a claim's refused watch (the reflector would retry
// it for ever) and queues the claim, to be looked at without it.
func (m *Manager) watchRefused(key claimKey, err error) {
	e := &m.exp
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.forbiddenAt.IsZero() || m.clock.Since(e.forbiddenAt) >= forbiddenRecheck {
		log.WithError(err).Warn("csi: claims cannot be watched (the Node authorizer allows a node get only; grant nodes list and watch of persistentvolumeclaims, the chart's rbac.volumeExpansion): online expansion waits for the pod's resync")
	}
	e.forbiddenAt = m.clock.Now()
	if w := e.watches[key]; w != nil {
		w.cancel()
		delete(e.watches, key)
	}
	e.queue.Add(key)
}

// runExpansions starts the watches of the claims tracked so far and
// works the queue until ctx ends.
func (m *Manager) runExpansions(ctx context.Context) {
	e := &m.exp
	e.mu.Lock()
	e.ctx = ctx
	for key := range e.uses {
		if e.watches[key] == nil {
			m.watchClaimLocked(key)
		}
		e.queue.Add(key)
	}
	e.mu.Unlock()
	go func() {
		<-ctx.Done()
		e.queue.ShutDown()
	}()
	for {
		key, quit := e.queue.Get()
		if quit {
			return
		}
		if err := m.syncClaim(ctx, key); err != nil {
			log.WithError(err).WithField("claim", key.String()).Warn("csi: online expansion")
			e.queue.AddRateLimited(key)
		} else {
			e.queue.Forget(key)
		}
		e.queue.Done(key)
	}
}

// syncClaim expands the claim's volumes mounted on the node, once each.
func (m *Manager) syncClaim(ctx context.Context, key claimKey) error {
	e := &m.exp
	e.mu.Lock()
	var uses []claimUse
	for _, u := range e.uses[key] {
		uses = append(uses, u)
	}
	var pvc *v1.PersistentVolumeClaim
	if w := e.watches[key]; w != nil && w.synced() {
		if obj, ok, _ := w.store.GetByKey(key.String()); ok {
			pvc = obj.(*v1.PersistentVolumeClaim)
		}
	}
	e.mu.Unlock()
	if len(uses) == 0 || m.cfg.Client == nil {
		return nil
	}
	if pvc == nil {
		var err error
		if pvc, err = m.getClaim(ctx, key); pvc == nil {
			return err
		}
	}
	slices.SortFunc(uses, func(a, b claimUse) int { return cmp.Compare(a.pod.UID, b.pod.UID) })
	done := map[v1.UniqueVolumeName]bool{}
	var errs []error
	for _, u := range uses {
		name := UniqueName(u.v.driver, u.v.handle)
		if done[name] {
			continue
		}
		done[name] = true
		if err := m.expandUse(ctx, key, u, pvc); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// getClaim reads the claim from the API; nil with no error when it is gone.
func (m *Manager) getClaim(ctx context.Context, key claimKey) (*v1.PersistentVolumeClaim, error) {
	pvc, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(key.namespace).Get(ctx, key.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("mountVolume.NodeExpandVolume get PVC failed : %w", err)
	}
	return pvc, nil
}

// expandUse expands one mounted volume of the claim, under the volume's
// lock (never between a pod's stage and publish, or during its teardown).
func (m *Manager) expandUse(ctx context.Context, key claimKey, u claimUse, pvc *v1.PersistentVolumeClaim) error {
	defer m.lockVolume(u.v.driver, u.v.handle)()
	name := UniqueName(u.v.driver, u.v.handle)
	e := &m.exp
	e.mu.Lock()
	_, still := e.uses[key][u.pod.UID]
	st := e.sizes[name]
	if st == nil {
		// The kubelet's InitializeClaimSize: what the claim says, when
		// the node first sees the volume mounted.
		st = &volumeSize{size: pvc.Status.Capacity[v1.ResourceStorage]}
		if still {
			e.sizes[name] = st
		}
	}
	cur := *st
	e.mu.Unlock()
	if !still {
		return nil
	}
	// The PV as it is now: the pod's was resolved when it started.
	pv, err := m.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, u.v.specName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get PV %s: %w", u.v.specName, err)
	}
	if pv.Spec.CSI == nil {
		return nil
	}
	// A watched claim can be older than the PV just read. A resizer sets
	// the claim's allocated size before it grows the PV, so a claim
	// without one beside a grown PV may only be behind: planned on it, the
	// legacy expansion would finish the claim at once, and the resizer's
	// NodeResizePending, written after, would find the node with nothing
	// left to do (the claim stuck pending). The claim as it is now, read
	// after the PV, decides.
	if p := planExpansion(cur, pvc, pv); p.legacy && p.call {
		if pvc, err = m.getClaim(ctx, key); pvc == nil {
			return err
		}
	}
	err = m.expand(ctx, u, pvc, pv, &cur)
	e.mu.Lock()
	if s := e.sizes[name]; s != nil {
		*s = cur
	}
	e.mu.Unlock()
	return err
}

package objects

import (
	"context"
	"fmt"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// MaxIdle is how long a watch outlives its last read: the kubelet's
// five pod resync periods (syncFrequency), never under a minute. A content
// volume is re-read every resync, so only objects that env alone refers to
// (or of pods gone) go idle.
func MaxIdle(syncFrequency time.Duration) time.Duration {
	return max(5*syncFrequency, time.Minute)
}

// NewCache reads pods' ConfigMaps and Secrets as the kubelet's
// watch-based object managers do: one watch per object (a field selector
// on its name, which the Node authorizer allows for objects of the node's
// pods), started by its first read, stopped once unread for maxIdle
// (MaxIdle) or when ctx ends, reads answered from the watch's store once listed.
// A burst of pods that share an object (kube-root-ca.crt) costs one list
// and one watch instead of a GET per container. Tokens stay direct calls.
func NewCache(ctx context.Context, client kubernetes.Interface, clk clock.WithDelayedExecution, maxIdle time.Duration) *Cache {
	return &Cache{ctx: ctx, api: Client{client}, client: client, clock: clk, maxIdle: maxIdle,
		items: map[objectKey]*watchedObject{}}
}

// Cache is NewCache's: its reads are the watches' stores' objects, read only.
type Cache struct {
	ctx     context.Context
	api     Client
	client  kubernetes.Interface
	clock   clock.WithDelayedExecution
	maxIdle time.Duration

	mu    sync.Mutex
	items map[objectKey]*watchedObject
}

type objectKey struct {
	kind      *objectKind
	namespace string
	name      string
}

// objectKind is what differs between watching ConfigMaps and Secrets.
type objectKind struct {
	resource  schema.GroupResource // singular, as the kubelet's errors word it
	newObject func() runtime.Object
	list      func(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error)
	watch     func(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (watch.Interface, error)
	immutable func(runtime.Object) bool
}

var configMapKind = &objectKind{
	resource:  schema.GroupResource{Resource: "configmap"},
	newObject: func() runtime.Object { return &v1.ConfigMap{} },
	list: func(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().ConfigMaps(ns).List(ctx, o)
	},
	watch: func(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (watch.Interface, error) {
		return c.CoreV1().ConfigMaps(ns).Watch(ctx, o)
	},
	immutable: func(o runtime.Object) bool {
		cm, ok := o.(*v1.ConfigMap)
		return ok && cm.Immutable != nil && *cm.Immutable
	},
}

var secretKind = &objectKind{
	resource:  schema.GroupResource{Resource: "secret"},
	newObject: func() runtime.Object { return &v1.Secret{} },
	list: func(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Secrets(ns).List(ctx, o)
	},
	watch: func(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (watch.Interface, error) {
		return c.CoreV1().Secrets(ns).Watch(ctx, o)
	},
	immutable: func(o runtime.Object) bool {
		s, ok := o.(*v1.Secret)
		return ok && s.Immutable != nil && *s.Immutable
	},
}

func (c *Cache) ConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	o, err := c.get(ctx, configMapKind, ns, name)
	if err != nil {
		return nil, err
	}
	if cm, ok := o.(*v1.ConfigMap); ok {
		return cm, nil
	}
	return nil, fmt.Errorf("unexpected object type %T", o)
}

func (c *Cache) Secret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	o, err := c.get(ctx, secretKind, ns, name)
	if err != nil {
		return nil, err
	}
	if s, ok := o.(*v1.Secret); ok {
		return s, nil
	}
	return nil, fmt.Errorf("unexpected object type %T", o)
}

func (c *Cache) CreateToken(ctx context.Context, ns, sa string, req *authv1.TokenRequest) (*authv1.TokenRequest, error) {
	return c.api.CreateToken(ctx, ns, sa, req)
}

// get answers from the object's watch, waiting for its first list. While
// the watch cannot list (the Node authorizer has not seen the pod yet, the
// apiserver fails), a direct GET answers instead: the caller gets the API's
// own answer at once rather than after the reflector's back-off.
// The objects returned are the store's: read only.
func (c *Cache) get(ctx context.Context, kind *objectKind, ns, name string) (runtime.Object, error) {
	w := c.acquire(kind, ns, name)
	defer c.release(w)
	for {
		synced, listErr, changed := w.state()
		if synced {
			break
		}
		if listErr != nil || c.ctx.Err() != nil {
			return c.direct(ctx, kind, ns, name)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
		}
	}
	o, ok, err := w.store.GetByKey(cacheKey(ns, name))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(kind.resource, name)
	}
	obj := o.(runtime.Object)
	if kind.immutable(obj) {
		// An immutable object cannot change: its store stays, its watch goes.
		w.cancel()
	}
	return obj, nil
}

func (c *Cache) direct(ctx context.Context, kind *objectKind, ns, name string) (runtime.Object, error) {
	if kind == configMapKind {
		return c.api.ConfigMap(ctx, ns, name)
	}
	return c.api.Secret(ctx, ns, name)
}

func cacheKey(ns, name string) string { return ns + "/" + name }

// watchedObject is one object's reflector and store, from its first read
// until it goes idle; a read after that starts a new one.
type watchedObject struct {
	key    objectKey
	store  cache.Store
	cancel context.CancelFunc

	// Guarded by Cache.mu.
	readers    int
	lastAccess time.Time

	mu      sync.Mutex
	synced  bool
	listErr error
	changed chan struct{} // closed and replaced at each list's outcome
}

func (w *watchedObject) state() (bool, error, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced, w.listErr, w.changed
}

// listed records the outcome of a list: a store once listed stays the
// answer (as the kubelet's does) while the reflector relists and rewatches.
func (w *watchedObject) listed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listErr = err
	if err == nil {
		w.synced = true
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// acquire returns the object's watch, started if it was not, and counts
// a reader so that it is not stopped under a read in progress.
func (c *Cache) acquire(kind *objectKind, ns, name string) *watchedObject {
	key := objectKey{kind, ns, name}
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.items[key]
	if !ok {
		w = c.start(key)
		c.items[key] = w
		c.scheduleIdleCheck(w, c.maxIdle)
	}
	w.readers++
	w.lastAccess = c.clock.Now()
	return w
}

func (c *Cache) release(w *watchedObject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.readers--
	w.lastAccess = c.clock.Now()
}

// start runs a reflector for the one object, as the kubelet's object
// cache does (a field selector on the name, long watches).
func (c *Cache) start(key objectKey) *watchedObject {
	ctx, cancel := context.WithCancel(c.ctx)
	w := &watchedObject{key: key, cancel: cancel, changed: make(chan struct{})}
	w.store = &syncedStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), w: w}
	selector := fields.OneTermEqualSelector("metadata.name", key.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			l, err := key.kind.list(ctx, c.client, key.namespace, o)
			if err != nil {
				w.listed(err)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return key.kind.watch(ctx, c.client, key.namespace, o)
		},
	}
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, c.client), key.kind.newObject(), w.store,
		cache.ReflectorOptions{Name: fmt.Sprintf("%s %s/%s", key.kind.resource.Resource, key.namespace, key.name), MinWatchTimeout: 30 * time.Minute})
	go r.RunWithContext(ctx)
	return w
}

// scheduleIdleCheck stops the watch once it has not been read for maxIdle.
func (c *Cache) scheduleIdleCheck(w *watchedObject, after time.Duration) {
	// Off the clock's callback: a fake clock runs it holding its own lock.
	c.clock.AfterFunc(after, func() { go c.idleCheck(w) })
}

func (c *Cache) idleCheck(w *watchedObject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	idle := c.clock.Since(w.lastAccess)
	if w.readers > 0 || idle < c.maxIdle {
		next := c.maxIdle - idle
		if next <= 0 {
			next = c.maxIdle
		}
		c.scheduleIdleCheck(w, next)
		return
	}
	w.cancel()
	delete(c.items, w.key)
}

// syncedStore tells its watchedObject when the reflector has listed.
type syncedStore struct {
	cache.Store
	w *watchedObject
}

func (s *syncedStore) Replace(list []interface{}, rv string) error {
	if err := s.Store.Replace(list, rv); err != nil {
		return err
	}
	s.w.listed(nil)
	return nil
}

package podspec

import (
	"context"
	"fmt"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	log "github.com/sirupsen/logrus"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// refresher keeps what a running pod's volumes show up to date: it
// refreshes projected service-account tokens at 80 % of their life, as the
// kubelet's token manager does, and rewrites ConfigMap, Secret, projected and
// downward API volumes periodically and when the pod's labels or annotations
// change, as the kubelet's pod resync does.
type refresher struct {
	r    *Runtime
	mu   sync.Mutex
	due  map[types.UID]time.Time
	wake chan struct{}
	// cache holds issued tokens by request, keys which requests a pod made.
	cache map[string]cachedToken
	keys  map[types.UID]map[string]bool
	meta  map[types.UID]metav1.ObjectMeta
	// released are the pods that ended: their volumes are gone and are
	// never written again. writing is held while one pod's volumes are
	// refreshed, so a release waits for a refresh under way.
	released map[types.UID]bool
	writing  sync.Mutex
}

func newRefresher(r *Runtime) *refresher {
	return &refresher{r: r, due: map[types.UID]time.Time{}, wake: make(chan struct{}, 1),
		cache: map[string]cachedToken{}, keys: map[types.UID]map[string]bool{}, meta: map[types.UID]metav1.ObjectMeta{},
		released: map[types.UID]bool{}}
}

// DefaultSyncFrequency is the kubelet's syncFrequency by default: how often
// the content volumes of a running pod are rewritten from fresh reads of
// what they project (Config.SyncFrequency).
const DefaultSyncFrequency = time.Minute

// resyncJitter is the kubelet's workerResyncIntervalJitterFactor: a pod's
// next resync is due within half a period after the period.
const resyncJitter = 0.5

// maxTokenAge forces a new token a day after issue whatever its lifetime,
// as the kubelet's token manager does.
const maxTokenAge = 24 * time.Hour

type cachedToken struct {
	token   string
	refresh time.Time
}

// hasContentVolumes: the pod has volumes whose files come from API objects.
func hasContentVolumes(pod *v1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if volumemanager.IsContent(&pod.Spec.Volumes[i]) {
			return true
		}
	}
	return false
}

// scheduleResync asks for the pod's content volumes to be rewritten by due.
func (t *refresher) scheduleResync(pod *v1.Pod, due time.Time) {
	if !hasContentVolumes(pod) || lifecycle.Terminal(pod.Status.Phase) {
		return
	}
	t.mu.Lock()
	if t.released[pod.UID] {
		t.mu.Unlock()
		return
	}
	if cur, ok := t.due[pod.UID]; !ok || due.Before(cur) {
		t.due[pod.UID] = due
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// nextResync spreads the periodic rewrites of many pods over time, as the
// kubelet's wait.Jitter(resyncInterval, 0.5).
func (r *Runtime) nextResync() time.Time {
	return time.Now().Add(jittered(r.syncFrequency()))
}

func jittered(d time.Duration) time.Duration {
	return d + time.Duration(rand.Float64()*resyncJitter*float64(d))
}

func (r *Runtime) syncFrequency() time.Duration {
	if r.cfg.SyncFrequency > 0 {
		return r.cfg.SyncFrequency
	}
	return DefaultSyncFrequency
}

// podUpdated rewrites a pod's downward API files at once when the labels or
// annotations they may show changed, as the kubelet syncs an updated pod.
func (t *refresher) podUpdated(old, pod *v1.Pod) {
	if old == nil || (reflect.DeepEqual(old.Labels, pod.Labels) && reflect.DeepEqual(old.Annotations, pod.Annotations)) {
		return
	}
	t.mu.Lock()
	t.meta[pod.UID] = pod.ObjectMeta
	t.mu.Unlock()
	t.scheduleResync(pod, time.Now())
}

// podFor is the pod whose volumes a resync writes: the worker's view, with
// the newest labels and annotations even before the worker synced them.
func (t *refresher) podFor(uid types.UID) *v1.Pod {
	pod := t.r.cfg.Pod(uid)
	if pod == nil {
		return nil
	}
	t.mu.Lock()
	meta, ok := t.meta[uid]
	delete(t.meta, uid)
	t.mu.Unlock()
	if ok {
		pod = pod.DeepCopy()
		pod.Labels, pod.Annotations = meta.Labels, meta.Annotations
	}
	return pod
}

// token returns a service-account token bound to the pod, from cache while
// it is younger than 80 % of its life, else freshly requested.
func (t *refresher) token(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) (string, time.Time, error) {
	exp := int64(3600)
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	key := fmt.Sprintf("%s/%s/%s/%d", sa, pod.UID, src.Audience, exp)
	t.mu.Lock()
	c, ok := t.cache[key]
	t.mu.Unlock()
	if ok && time.Now().Before(c.refresh) {
		return c.token, c.refresh, nil
	}
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	tr, err := t.r.cfg.Objects.CreateToken(ctx, pod.Namespace, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			Audiences:         aud,
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("failed to fetch token: %w", err)
	}
	now := time.Now()
	life := tr.Status.ExpirationTimestamp.Sub(now)
	refresh := now.Add(min(life*8/10, maxTokenAge))
	t.mu.Lock()
	t.cache[key] = cachedToken{token: tr.Status.Token, refresh: refresh}
	if t.keys[pod.UID] == nil {
		t.keys[pod.UID] = map[string]bool{}
	}
	t.keys[pod.UID][key] = true
	t.mu.Unlock()
	return tr.Status.Token, refresh, nil
}

// dropTokens forgets the cached tokens of a pod that is gone. Called with mu.
func (t *refresher) dropTokens(uid types.UID) {
	for k := range t.keys[uid] {
		delete(t.cache, k)
	}
	delete(t.keys, uid)
	delete(t.meta, uid)
}

func (t *refresher) forget(uid types.UID) {
	t.mu.Lock()
	delete(t.due, uid)
	delete(t.released, uid)
	t.dropTokens(uid)
	t.mu.Unlock()
}

// release takes a pod that ended off the refresh for good, once a refresh
// of it under way is done: its volumes are about to be removed and nothing
// may write them again, as the kubelet's volume manager drops a terminated
// pod from its desired state.
func (t *refresher) release(uid types.UID) {
	t.writing.Lock()
	defer t.writing.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.released[uid] = true
	delete(t.due, uid)
	t.dropTokens(uid)
}

// refresh rewrites one pod's content volumes, unless it was released.
func (t *refresher) refresh(ctx context.Context, uid types.UID) {
	t.writing.Lock()
	defer t.writing.Unlock()
	t.mu.Lock()
	released := t.released[uid]
	t.mu.Unlock()
	if released {
		return
	}
	pod := t.podFor(uid)
	if pod == nil || pod.DeletionTimestamp != nil {
		return
	}
	sb, err := t.r.rt.Sandbox(string(uid))
	var ips []string
	if err == nil {
		ips = sb.IPs
	}
	if err := t.r.setupVolumes(ctx, pod, ips); err != nil {
		log.WithError(err).WithField("pod", key(pod.Namespace, pod.Name)).Warn("refreshing volumes")
	}
}

func (t *refresher) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t.mu.Lock()
		var next time.Time
		var dueNow []types.UID
		for uid, d := range t.due {
			if !d.After(time.Now()) {
				dueNow = append(dueNow, uid)
				delete(t.due, uid)
			} else if next.IsZero() || d.Before(next) {
				next = d
			}
		}
		t.mu.Unlock()
		for _, uid := range dueNow {
			t.refresh(ctx, uid)
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-t.wake:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// supervise runs the token and volume refresher and survives its panics: a
// pod whose refresh panicked was already taken off the schedule, so the
// others go on being refreshed after a pause.
func (t *refresher) supervise(ctx context.Context) {
	for ctx.Err() == nil {
		func() {
			defer crash.Recover(log.WithField("loop", "token and volume refresh"), nil)
			t.run(ctx)
		}()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

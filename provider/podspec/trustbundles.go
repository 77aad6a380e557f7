package podspec

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"math/rand"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	lrucache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1beta1"
	"k8s.io/client-go/tools/cache"
)

// TrustBundles gives projected clusterTrustBundle sources their PEM: the
// kubelet's clustertrustbundle.Manager.
type TrustBundles interface {
	ByName(name string, allowMissing bool) ([]byte, error)
	BySigner(signerName string, selector *metav1.LabelSelector, allowMissing bool) ([]byte, error)
}

// errNoTrustBundles is the kubelet's NoopManager answer: the
// ClusterTrustBundleProjection gate off, or no ClusterTrustBundle API.
var errNoTrustBundles = errors.New("ClusterTrustBundle projection is not supported in static kubelet mode")

const (
	// maxLabelSelectorLength bounds a selector as the kubelet does.
	maxLabelSelectorLength = 100 * 1024
	trustBundleCacheTTL    = 5 * time.Minute
)

// trustBundleFiles projects a clusterTrustBundle source as the kubelet's
// projected volume does: its file the normalized anchors (empty when an
// optional source matches nothing), with the volume's mode, 0600 when the
// pod has an fsGroup.
func (r *Runtime) trustBundleFiles(pod *v1.Pod, src *v1.ClusterTrustBundleProjection, defMode *int32) (map[string]volumeFile, error) {
	tb := r.cfg.TrustBundles
	if tb == nil {
		return nil, errNoTrustBundles
	}
	allowEmpty := src.Optional != nil && *src.Optional
	var anchors []byte
	var err error
	switch {
	case src.Name != nil:
		anchors, err = tb.ByName(*src.Name, allowEmpty)
	case src.SignerName != nil:
		anchors, err = tb.BySigner(*src.SignerName, src.LabelSelector, allowEmpty)
	default:
		err = errors.New("ClusterTrustBundle projection requires either name or signerName to be set")
	}
	if err != nil {
		return nil, err
	}
	m := mode(defMode, nil)
	if volumemanager.FSGroup(pod) != nil {
		m = 0o600
	}
	return map[string]volumeFile{src.Path: {Data: anchors, Mode: m}}, nil
}

// LazyTrustBundles is the kubelet's LazyInformerManager over the
// certificates.k8s.io/v1beta1 API: the informer of ClusterTrustBundles is
// started at the first request, if the API server serves them; if not,
// every request gets the kubelet's answer for no manager.
type LazyTrustBundles struct {
	ctx       context.Context
	client    kubernetes.Interface
	cacheSize int

	mu      sync.Mutex
	manager TrustBundles
}

// NewLazyTrustBundles makes the manager; cacheSize is the kubelet's 2 ×
// maxPods.
func NewLazyTrustBundles(ctx context.Context, client kubernetes.Interface, cacheSize int) *LazyTrustBundles {
	return &LazyTrustBundles{ctx: ctx, client: client, cacheSize: cacheSize}
}

func (l *LazyTrustBundles) get() (TrustBundles, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.manager != nil {
		return l.manager, nil
	}
	res, err := l.client.Discovery().ServerResourcesForGroupVersion(certificatesv1beta1.SchemeGroupVersion.String())
	available := false
	if res != nil {
		for _, r := range res.APIResources {
			available = available || r.Name == "clustertrustbundles"
		}
	}
	switch {
	case available:
	case err == nil || apierrors.IsNotFound(err):
		log.Info("No version of the ClusterTrustBundle API was found, the ClusterTrustBundle informer won't be started")
		l.manager = noTrustBundles{}
		return l.manager, nil
	default:
		return nil, fmt.Errorf("failed to determine which informer manager to choose: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(l.client, 0)
	inf := f.Certificates().V1beta1().ClusterTrustBundles()
	m, err := newTrustBundleInformer(inf.Informer(), inf.Lister(), l.cacheSize)
	if err != nil {
		return nil, fmt.Errorf("error starting informer-based ClusterTrustBundle manager: %w", err)
	}
	f.Start(l.ctx.Done())
	log.Info("Started ClusterTrustBundle informer")
	// A read follows at once: give the informer its first list.
	wctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	cache.WaitForCacheSync(wctx.Done(), inf.Informer().HasSynced)
	l.manager = m
	return m, nil
}

func (l *LazyTrustBundles) ByName(name string, allowMissing bool) ([]byte, error) {
	m, err := l.get()
	if err != nil {
		return nil, err
	}
	return m.ByName(name, allowMissing)
}

func (l *LazyTrustBundles) BySigner(signerName string, selector *metav1.LabelSelector, allowMissing bool) ([]byte, error) {
	m, err := l.get()
	if err != nil {
		return nil, err
	}
	return m.BySigner(signerName, selector, allowMissing)
}

type noTrustBundles struct{}

func (noTrustBundles) ByName(string, bool) ([]byte, error) { return nil, errNoTrustBundles }
func (noTrustBundles) BySigner(string, *metav1.LabelSelector, bool) ([]byte, error) {
	return nil, errNoTrustBundles
}

// trustBundleInformer is the kubelet's InformerManager: bundles from the
// informer's cache, normalized (each certificate once, in random order, so
// that no consumer comes to rely on one), the result cached per name or
// signer and selector until a bundle of that name or signer changes or
// five minutes pass.
type trustBundleInformer struct {
	synced func() bool
	lister certlisters.ClusterTrustBundleLister
	cache  *lrucache.LRUExpireCache
}

type trustBundleKey struct {
	name, signerName, selector string
}

func newTrustBundleInformer(inf cache.SharedIndexInformer, lister certlisters.ClusterTrustBundleLister, cacheSize int) (*trustBundleInformer, error) {
	m := &trustBundleInformer{synced: inf.HasSynced, lister: lister, cache: lrucache.NewLRUExpireCache(cacheSize)}
	drop := func(obj any) {
		ctb, ok := obj.(*certificatesv1beta1.ClusterTrustBundle)
		if !ok {
			tomb, ok := obj.(cache.DeletedFinalStateUnknown)
			if !ok {
				return
			}
			if ctb, ok = tomb.Obj.(*certificatesv1beta1.ClusterTrustBundle); !ok {
				return
			}
		}
		m.dropFor(ctb)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    drop,
		UpdateFunc: func(_, obj any) { drop(obj) },
		DeleteFunc: drop,
	})
	return m, err
}

func (m *trustBundleInformer) dropFor(ctb *certificatesv1beta1.ClusterTrustBundle) {
	if signer := ctb.Spec.SignerName; signer != "" {
		m.cache.RemoveAll(func(k any) bool { return k.(trustBundleKey).signerName == signer })
		return
	}
	m.cache.RemoveAll(func(k any) bool { return k.(trustBundleKey).name == ctb.Name })
}

func (m *trustBundleInformer) ByName(name string, allowMissing bool) ([]byte, error) {
	if !m.synced() {
		return nil, errors.New("ClusterTrustBundle informer has not yet synced")
	}
	key := trustBundleKey{name: name}
	if v, ok := m.cache.Get(key); ok {
		return v.([]byte), nil
	}
	ctb, err := m.lister.Get(name)
	if apierrors.IsNotFound(err) && allowMissing {
		return []byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("while getting ClusterTrustBundle: %w", err)
	}
	out := normalizeTrustAnchors([]*certificatesv1beta1.ClusterTrustBundle{ctb})
	m.cache.Add(key, out, trustBundleCacheTTL)
	return out, nil
}

func (m *trustBundleInformer) BySigner(signerName string, selector *metav1.LabelSelector, allowMissing bool) ([]byte, error) {
	if !m.synced() {
		return nil, errors.New("ClusterTrustBundle informer has not yet synced")
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("while parsing label selector: %w", err)
	}
	key := trustBundleKey{signerName: signerName, selector: sel.String()}
	if n := len(key.selector); n > maxLabelSelectorLength {
		return nil, fmt.Errorf("label selector length (%d) is larger than %d", n, maxLabelSelectorLength)
	}
	if v, ok := m.cache.Get(key); ok {
		return v.([]byte), nil
	}
	all, err := m.lister.List(sel)
	if err != nil {
		return nil, fmt.Errorf("while listing ClusterTrustBundles matching label selector %v: %w", selector, err)
	}
	var matched []*certificatesv1beta1.ClusterTrustBundle
	for _, ctb := range all {
		if ctb.Spec.SignerName == signerName {
			matched = append(matched, ctb)
		}
	}
	if len(matched) == 0 {
		if allowMissing {
			return []byte{}, nil
		}
		return nil, errors.New("combination of signerName and labelSelector matched zero ClusterTrustBundles")
	}
	out := normalizeTrustAnchors(matched)
	m.cache.Add(key, out, trustBundleCacheTTL)
	return out, nil
}

// normalizeTrustAnchors is the kubelet's: every CERTIFICATE block of the
// bundles once, shuffled, re-encoded as PEM.
func normalizeTrustAnchors(ctbs []*certificatesv1beta1.ClusterTrustBundle) []byte {
	set := sets.Set[string]{}
	for _, ctb := range ctbs {
		rest := []byte(ctb.Spec.TrustBundle)
		for {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			set.Insert(string(b.Bytes))
		}
	}
	list := sets.List(set)
	rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	out := []byte{}
	for _, der := range list {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte(der)})...)
	}
	return out
}

// Package podcerts is the kubelet's pod certificate manager (KEP-4317,
// the PodCertificateRequest gate): for each projected podCertificate
// source of the node's pods it makes a key pair, asks the source's signer
// for a certificate with a PodCertificateRequest, and holds the key and
// the issued chain for the volume; it asks again from the certificate's
// beginRefreshAt, serving the old one meanwhile.
package podcerts

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// The kubelet's thresholds: a request not seen for 10 minutes is taken
// as deleted and made again; a refresh 10 minutes late, or a certificate
// past notAfter, is an event on the pod.
const (
	assumeDeletedThreshold = 10 * time.Minute
	refreshOverdueDuration = 10 * time.Minute
)

// Pods are the node's pods (the provider's registry).
type Pods interface {
	Pod(uid types.UID) *v1.Pod
	ActivePods() []*v1.Pod
}

// Recorder emits events about a pod.
type Recorder interface {
	Event(pod *v1.Pod, container, eventType, reason, message string)
}

// Config is what the manager uses.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	Pods     Pods
	Events   Recorder
	// Clock is the manager's time; nil is the real clock.
	Clock clock.WithTicker
}

// Manager issues and refreshes the node's pod certificates.
type Manager struct {
	cfg    Config
	clock  clock.WithTicker
	queue  workqueue.TypedRateLimitingInterface[key]
	pcrs   cache.SharedIndexInformer
	lister certlisters.PodCertificateRequestLister

	mu    sync.Mutex
	store map[key]*record
	// unserved says why there is no PodCertificateRequest API to ask
	// ("" while there is, or until Run has looked).
	unserved string

	nodeUID types.UID
}

type key struct {
	Namespace, PodName, PodUID, VolumeName string
	SourceIndex                            int
}

type record struct {
	mu    sync.Mutex
	state credState
}

// New makes the manager; Run starts it.
func New(cfg Config) *Manager {
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		// As the kubelet: only this node's requests.
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}))
	inf := f.Certificates().V1beta1().PodCertificateRequests()
	m := &Manager{cfg: cfg, clock: c, pcrs: inf.Informer(), lister: inf.Lister(), store: map[key]*record{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())}
	requeue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if pcr, ok := obj.(*certificatesv1beta1.PodCertificateRequest); ok {
			m.queuePod(pcr.Spec.PodUID)
		}
	}
	_, _ = m.pcrs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: requeue, UpdateFunc: func(_, obj any) { requeue(obj) }, DeleteFunc: requeue,
	})
	return m
}

// Run processes projections until ctx ends: on requests' changes, and
// every minute for all pods (refreshes, abandoned requests).
func (m *Manager) Run(ctx context.Context) {
	defer m.queue.ShutDown()
	// An API server without the API (its gate off, another version) would
	// have the informer fail for ever: say so once, and to every pod that
	// asks.
	if why := m.apiUnserved(ctx); why != "" {
		log.Warn("pod certificates: " + why)
		m.mu.Lock()
		m.unserved = why
		m.mu.Unlock()
		return
	}
	go m.pcrs.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), m.pcrs.HasSynced) {
		return
	}
	log.Info("pod certificate manager started")
	go wait.JitterUntilWithContext(ctx, func(context.Context) {
		for _, p := range m.cfg.Pods.ActivePods() {
			m.queuePod(p.UID)
		}
	}, time.Minute, 1.0, false)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for m.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

// apiUnserved says why the API server has no PodCertificateRequests for
// the node to create, "" if it has; a discovery error is retried.
func (m *Manager) apiUnserved(ctx context.Context) string {
	gv := certificatesv1beta1.SchemeGroupVersion.String()
	var why string
	_ = wait.PollUntilContextCancel(ctx, 10*time.Second, true, func(context.Context) (bool, error) {
		res, err := m.cfg.Client.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil && !apierrors.IsNotFound(err) {
			log.WithError(err).Warn("pod certificates: discovering the PodCertificateRequest API")
			return false, nil
		}
		why = "the API server serves no " + gv + " PodCertificateRequests"
		if res != nil {
			for _, r := range res.APIResources {
				if r.Name == "podcertificaterequests" {
					why = ""
				}
			}
		}
		return true, nil
	})
	return why
}

// ForgetPod drops the pod's keys and certificates.
func (m *Manager) ForgetPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.store {
		if k.PodUID == string(uid) {
			delete(m.store, k)
		}
	}
}

func (m *Manager) queuePod(uid types.UID) {
	pod := m.cfg.Pods.Pod(uid)
	if pod == nil {
		return
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for i, s := range v.Projected.Sources {
			if s.PodCertificate != nil {
				m.queue.Add(key{Namespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), VolumeName: v.Name, SourceIndex: i})
			}
		}
	}
}

func (m *Manager) processNext(ctx context.Context) bool {
	k, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(k)
	l := log.WithFields(log.Fields{"pod": k.Namespace + "/" + k.PodName, "volume": k.VolumeName, "sourceIndex": k.SourceIndex})
	defer crash.Recover(l, nil)
	// A change reaches the volume at its next write: the sandbox's retry
	// while it waits for the first certificate, the periodic rewrite of
	// content volumes (a minute) for a refresh, as the kubelet's resync.
	if _, err := m.handle(ctx, k); err != nil {
		l.WithError(err).Warn("while handling podCertificate projected volume source")
		m.queue.AddRateLimited(k)
		return true
	}
	m.queue.Forget(k)
	return true
}

// CredentialBundle is the source's key (PKCS#8 PEM) and certificate chain,
// or why there is none (not issued yet, denied, failed).
func (m *Manager) CredentialBundle(namespace, podName, podUID, volumeName string, sourceIndex int) ([]byte, []byte, error) {
	k := key{Namespace: namespace, PodName: podName, PodUID: podUID, VolumeName: volumeName, SourceIndex: sourceIndex}
	m.mu.Lock()
	rec, unserved := m.store[k], m.unserved
	m.mu.Unlock()
	if unserved != "" {
		return nil, nil, errors.New(unserved)
	}
	if rec == nil {
		// Asked before the manager saw the pod: queue it now.
		m.queuePod(types.UID(podUID))
		return nil, nil, fmt.Errorf("no credentials yet for key=%v", k)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.state.credBundle()
}

// handle moves one projection along the kubelet's state machine; changed
// says its credentials (or their failure) changed.
func (m *Manager) handle(ctx context.Context, k key) (changed bool, err error) {
	pod := m.cfg.Pods.Pod(types.UID(k.PodUID))
	if pod == nil {
		m.ForgetPod(types.UID(k.PodUID))
		return false, nil
	}
	var src *v1.PodCertificateProjection
	for _, vol := range pod.Spec.Volumes {
		if vol.Name == k.VolumeName && vol.Projected != nil && k.SourceIndex < len(vol.Projected.Sources) {
			src = vol.Projected.Sources[k.SourceIndex].PodCertificate
		}
	}
	if src == nil {
		return false, nil
	}
	m.mu.Lock()
	rec := m.store[k]
	if rec == nil {
		rec = &record{state: &stateInitial{}}
		m.store[k] = rec
	}
	m.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	now := m.clock.Now()
	switch st := rec.state.(type) {
	case *stateInitial:
		priv, pcr, err := m.request(ctx, pod, src)
		if err != nil {
			return false, fmt.Errorf("while creating initial PodCertificateRequest: %w", err)
		}
		rec.state = &stateWait{privateKey: priv, pcrName: pcr.Name, abandonAt: pcr.CreationTimestamp.Add(assumeDeletedThreshold + jitter())}
		return false, nil
	case *stateWait:
		pcr, err := m.lister.PodCertificateRequests(k.Namespace).Get(st.pcrName)
		if apierrors.IsNotFound(err) && now.After(st.abandonAt) {
			rec.state = &stateInitial{}
			return false, fmt.Errorf("PodCertificateRequest %q appears to have been deleted", k.Namespace+"/"+st.pcrName)
		} else if err != nil {
			return false, fmt.Errorf("while getting PodCertificateRequest %q: %w", k.Namespace+"/"+st.pcrName, err)
		}
		next := m.outcome(pod, pcr, st.privateKey)
		if next != nil {
			rec.state = next
		}
		return next != nil, nil
	case *stateFresh:
		if now.Before(st.beginRefreshAt) {
			return false, nil
		}
		m.lateEvents(pod, &st.issued, now)
		priv, pcr, err := m.request(ctx, pod, src)
		if err != nil {
			return false, fmt.Errorf("while creating refresh PodCertificateRequest: %w", err)
		}
		rec.state = &stateWaitRefresh{issued: st.issued, privateKey: priv, pcrName: pcr.Name,
			abandonAt: pcr.CreationTimestamp.Add(assumeDeletedThreshold + jitter())}
		return false, nil
	case *stateWaitRefresh:
		pcr, err := m.lister.PodCertificateRequests(k.Namespace).Get(st.pcrName)
		if apierrors.IsNotFound(err) && now.After(st.abandonAt) {
			rec.state = &stateFresh{issued: st.issued}
			return false, fmt.Errorf("PodCertificateRequest appears to have been deleted")
		} else if err != nil {
			return false, fmt.Errorf("while getting PodCertificateRequest %q: %w", k.Namespace+"/"+st.pcrName, err)
		}
		if next := m.outcome(pod, pcr, st.privateKey); next != nil {
			rec.state = next
			return true, nil
		}
		m.lateEvents(pod, &st.issued, now)
		return false, nil
	}
	// Denied and failed are for good.
	return false, nil
}

// outcome is the state a request's terminal condition leads to (with the
// kubelet's events), nil while it is pending.
func (m *Manager) outcome(pod *v1.Pod, pcr *certificatesv1beta1.PodCertificateRequest, priv []byte) credState {
	ref := pcr.Namespace + "/" + pcr.Name
	for _, c := range pcr.Status.Conditions {
		switch c.Type {
		case certificatesv1beta1.PodCertificateRequestConditionTypeDenied:
			m.event(pod, certificatesv1beta1.PodCertificateRequestConditionTypeDenied,
				fmt.Sprintf("PodCertificateRequest %s was denied, reason=%q, message=%q", ref, c.Reason, c.Message))
			return &stateDenied{reason: c.Reason, message: c.Message}
		case certificatesv1beta1.PodCertificateRequestConditionTypeFailed:
			m.event(pod, certificatesv1beta1.PodCertificateRequestConditionTypeFailed,
				fmt.Sprintf("PodCertificateRequest %s failed, reason=%q, message=%q", ref, c.Reason, c.Message))
			return &stateFailed{reason: c.Reason, message: c.Message}
		case certificatesv1beta1.PodCertificateRequestConditionTypeIssued:
			st := &stateFresh{issued: issued{privateKey: priv, certChain: cleanCertificateChain([]byte(pcr.Status.CertificateChain))}}
			if t := pcr.Status.BeginRefreshAt; t != nil {
				st.beginRefreshAt = t.Add(jitter())
			}
			if t := pcr.Status.NotAfter; t != nil {
				st.notAfter = t.Time
			}
			return st
		}
	}
	return nil
}

// lateEvents are the kubelet's warnings for a refresh 10 minutes overdue
// and an expired certificate, once each.
func (m *Manager) lateEvents(pod *v1.Pod, st *issued, now time.Time) {
	if now.After(st.beginRefreshAt.Add(refreshOverdueDuration)) && !st.overdueSent {
		m.event(pod, "CertificateOverdueForRefresh", "PodCertificate refresh overdue")
		st.overdueSent = true
	}
	if now.After(st.notAfter) && !st.expiredSent {
		m.event(pod, "CertificateExpired", "PodCertificate expired")
		st.expiredSent = true
	}
}

func (m *Manager) event(pod *v1.Pod, reason, msg string) {
	if m.cfg.Events != nil {
		m.cfg.Events.Event(pod, "", v1.EventTypeWarning, reason, msg)
	}
}

// request creates a PodCertificateRequest for a new key pair, as the
// kubelet's: its public key, a proof of possession over the pod's UID,
// the pod, its service account and the node by name and UID.
func (m *Manager) request(ctx context.Context, pod *v1.Pod, src *v1.PodCertificateProjection) ([]byte, *certificatesv1beta1.PodCertificateRequest, error) {
	sa, err := m.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, pod.Spec.ServiceAccountName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("while fetching service account: %w", err)
	}
	if m.nodeUID == "" {
		n, err := m.cfg.Client.CoreV1().Nodes().Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("while getting node object: %w", err)
		}
		m.nodeUID = n.UID
	}
	priv, pub, proof, err := generateKeyAndProof(src.KeyType, []byte(pod.UID))
	if err != nil {
		return nil, nil, fmt.Errorf("while generating keypair: %w", err)
	}
	pkix, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("while marshaling public key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("while PEM-encoding private key: while marshaling key to PKCS#8: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	req := &certificatesv1beta1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, GenerateName: "req-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "core/v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
		Spec: certificatesv1beta1.PodCertificateRequestSpec{
			SignerName: src.SignerName, PodName: pod.Name, PodUID: pod.UID,
			ServiceAccountName: pod.Spec.ServiceAccountName, ServiceAccountUID: sa.UID,
			NodeName: types.NodeName(m.cfg.NodeName), NodeUID: m.nodeUID,
			MaxExpirationSeconds: src.MaxExpirationSeconds, PKIXPublicKey: pkix, ProofOfPossession: proof,
			UnverifiedUserAnnotations: src.UserAnnotations,
		},
	}
	req, err = m.cfg.Client.CertificatesV1beta1().PodCertificateRequests(pod.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("while creating on API: %w", err)
	}
	return keyPEM, req, nil
}

// jitter spreads requests over 5 minutes, as the kubelet's.
func jitter() time.Duration { return time.Duration(mathrand.Int64N(int64(5 * time.Minute))) }

// The kubelet's states of one projection.
type credState interface {
	credBundle() (key, chain []byte, err error)
}

type issued struct {
	privateKey, certChain    []byte
	beginRefreshAt, notAfter time.Time
	overdueSent, expiredSent bool
}

type (
	stateInitial struct{}
	stateWait    struct {
		privateKey []byte
		pcrName    string
		abandonAt  time.Time
	}
	stateDenied struct{ reason, message string }
	stateFailed struct{ reason, message string }
	stateFresh  struct {
		issued
	}
	// stateWaitRefresh serves the issued credentials while a new request
	// is pending.
	stateWaitRefresh struct {
		issued
		privateKey []byte
		pcrName    string
		abandonAt  time.Time
	}
)

var errNotIssued = fmt.Errorf("credential bundle is not issued yet")

func (*stateInitial) credBundle() ([]byte, []byte, error) { return nil, nil, errNotIssued }
func (*stateWait) credBundle() ([]byte, []byte, error)    { return nil, nil, errNotIssued }
func (s *stateDenied) credBundle() ([]byte, []byte, error) {
	return nil, nil, fmt.Errorf("PodCertificateRequest was permanently denied: reason=%q message=%q", s.reason, s.message)
}
func (s *stateFailed) credBundle() ([]byte, []byte, error) {
	return nil, nil, fmt.Errorf("PodCertificateRequest was permanently failed: reason=%q message=%q", s.reason, s.message)
}
func (s *stateFresh) credBundle() ([]byte, []byte, error) { return s.privateKey, s.certChain, nil }
func (s *stateWaitRefresh) credBundle() ([]byte, []byte, error) {
	return s.issued.privateKey, s.certChain, nil
}

func hashBytes(in []byte) []byte {
	out := sha256.Sum256(in)
	return out[:]
}

// generateKeyAndProof is the kubelet's: a key of the source's type and its
// signature over the pod UID (PSS or ASN.1 over SHA-256; Ed25519 plain).
func generateKeyAndProof(keyType string, toBeSigned []byte) (crypto.PrivateKey, crypto.PublicKey, []byte, error) {
	rsaKey := func(bits int) (crypto.PrivateKey, crypto.PublicKey, []byte, error) {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("while generating RSA %d key: %w", bits, err)
		}
		sig, err := rsa.SignPSS(rand.Reader, k, crypto.SHA256, hashBytes(toBeSigned), nil)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("while signing proof: %w", err)
		}
		return k, &k.PublicKey, sig, nil
	}
	ecKey := func(c elliptic.Curve, name string) (crypto.PrivateKey, crypto.PublicKey, []byte, error) {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("while generating ECDSA %s key: %w", name, err)
		}
		sig, err := ecdsa.SignASN1(rand.Reader, k, hashBytes(toBeSigned))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("while signing proof: %w", err)
		}
		return k, &k.PublicKey, sig, nil
	}
	switch keyType {
	case "RSA3072":
		return rsaKey(3072)
	case "RSA4096":
		return rsaKey(4096)
	case "ECDSAP256":
		return ecKey(elliptic.P256(), "P256")
	case "ECDSAP384":
		return ecKey(elliptic.P384(), "P384")
	case "ECDSAP521":
		return ecKey(elliptic.P521(), "P521")
	case "ED25519":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("while generating Ed25519 key: %w", err)
		}
		return priv, pub, ed25519.Sign(priv, toBeSigned), nil
	}
	return nil, nil, nil, fmt.Errorf("unknown key type %q", keyType)
}

// cleanCertificateChain keeps the CERTIFICATE blocks' bytes only: no
// headers, nothing between blocks.
func cleanCertificateChain(in []byte) []byte {
	var out bytes.Buffer
	rest := in
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out.Bytes()
		}
		out.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes}))
	}
}

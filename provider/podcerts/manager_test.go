package podcerts

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	certlisters "k8s.io/client-go/listers/certificates/v1beta1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

type testPods struct{ pod *v1.Pod }

func (p testPods) Pod(uid types.UID) *v1.Pod {
	if p.pod != nil && p.pod.UID == uid {
		return p.pod
	}
	return nil
}
func (p testPods) ActivePods() []*v1.Pod { return []*v1.Pod{p.pod} }

type events struct {
	mu      sync.Mutex
	reasons []string
}

func (e *events) Event(_ *v1.Pod, _, _, reason, _ string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons = append(e.reasons, reason)
}

// testManager is a manager over a fake API whose requests get names and
// creation times, with its request lister fed by hand.
func testManager(t *testing.T, pod *v1.Pod, clk *clocktesting.FakeClock) (*Manager, *fake.Clientset, cache.Indexer, *events) {
	t.Helper()
	client := fake.NewClientset(
		&v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default", UID: "sa-uid"}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node-uid"}})
	n := 0
	client.PrependReactor("create", "podcertificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pcr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1beta1.PodCertificateRequest)
		n++
		pcr.Name = fmt.Sprintf("req-%d", n)
		pcr.CreationTimestamp = metav1.NewTime(clk.Now())
		return false, nil, nil
	})
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	ev := &events{}
	m := &Manager{cfg: Config{Client: client, NodeName: "node1", Pods: testPods{pod}, Events: ev}, clock: clk,
		lister: certlisters.NewPodCertificateRequestLister(idx), store: map[key]*record{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())}
	t.Cleanup(m.queue.ShutDown)
	return m, client, idx, ev
}

func certPod() *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pod-uid"},
		Spec: v1.PodSpec{ServiceAccountName: "default", Volumes: []v1.Volume{{Name: "certs", VolumeSource: v1.VolumeSource{
			Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
				{PodCertificate: &v1.PodCertificateProjection{SignerName: "x.example/s", KeyType: "ECDSAP256", CredentialBundlePath: "creds.pem"}},
			}}}}}}}
}

// issue signs the request's key and records it Issued in the lister.
func issue(t *testing.T, idx cache.Indexer, pcr *certificatesv1beta1.PodCertificateRequest, now time.Time) string {
	t.Helper()
	pub, err := x509.ParsePKIXPublicKey(pcr.Spec.PKIXPublicKey)
	if err != nil {
		t.Fatal(err)
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: now, NotAfter: now.Add(2 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	chain := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	pcr = pcr.DeepCopy()
	pcr.Status = certificatesv1beta1.PodCertificateRequestStatus{
		Conditions:       []metav1.Condition{{Type: certificatesv1beta1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue}},
		CertificateChain: "junk before\n" + chain,
		BeginRefreshAt:   &metav1.Time{Time: now.Add(time.Hour)}, NotAfter: &metav1.Time{Time: now.Add(2 * time.Hour)},
	}
	if err := idx.Add(pcr); err != nil {
		t.Fatal(err)
	}
	return chain
}

func lastRequest(t *testing.T, client *fake.Clientset) *certificatesv1beta1.PodCertificateRequest {
	t.Helper()
	l, err := client.CertificatesV1beta1().PodCertificateRequests("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) == 0 {
		t.Fatalf("requests: %v %v", l, err)
	}
	latest := &l.Items[0]
	for i := range l.Items {
		if l.Items[i].Name > latest.Name {
			latest = &l.Items[i]
		}
	}
	return latest
}

// The kubelet's state machine for one source: a request for a fresh key
// (its spec as the kubelet's, the proof over the pod UID), nothing served
// until issued, then the key and cleaned chain; from beginRefreshAt a new
// request while the old credentials are served; a denial is for good.
func TestManagerLifecycle(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	pod := certPod()
	m, client, idx, ev := testManager(t, pod, clk)
	k := key{Namespace: "ns", PodName: "p", PodUID: "pod-uid", VolumeName: "certs", SourceIndex: 1}

	if _, _, err := m.CredentialBundle("ns", "p", "pod-uid", "certs", 1); err == nil || !strings.HasPrefix(err.Error(), "no credentials yet") {
		t.Fatalf("before any request: %v", err)
	}
	if m.queue.Len() != 1 {
		t.Fatalf("asking queued %d projections, want the pod's one", m.queue.Len())
	}
	if _, err := m.handle(ctx, k); err != nil {
		t.Fatal(err)
	}
	req := lastRequest(t, client)
	s := req.Spec
	if s.SignerName != "x.example/s" || s.PodName != "p" || s.PodUID != "pod-uid" || s.ServiceAccountName != "default" ||
		s.ServiceAccountUID != "sa-uid" || s.NodeName != "node1" || s.NodeUID != "node-uid" || req.GenerateName != "req-" ||
		len(req.OwnerReferences) != 1 || req.OwnerReferences[0].UID != "pod-uid" {
		t.Fatalf("request %+v", req)
	}
	pub, _ := x509.ParsePKIXPublicKey(s.PKIXPublicKey)
	sum := sha256.Sum256([]byte("pod-uid"))
	if !ecdsa.VerifyASN1(pub.(*ecdsa.PublicKey), sum[:], s.ProofOfPossession) {
		t.Fatal("proof of possession")
	}
	if _, _, err := m.CredentialBundle("ns", "p", "pod-uid", "certs", 1); err == nil || err.Error() != "credential bundle is not issued yet" {
		t.Fatalf("pending: %v", err)
	}
	// Pending: nothing changes.
	if err := idx.Add(req); err != nil {
		t.Fatal(err)
	}
	if changed, err := m.handle(ctx, k); changed || err != nil {
		t.Fatalf("pending: %v %v", changed, err)
	}
	chain := issue(t, idx, req, clk.Now())
	if changed, err := m.handle(ctx, k); !changed || err != nil {
		t.Fatalf("issued: %v %v", changed, err)
	}
	keyPEM, got, err := m.CredentialBundle("ns", "p", "pod-uid", "certs", 1)
	if err != nil || string(got) != chain {
		t.Fatalf("issued: chain %q, %v", got, err)
	}
	blk, _ := pem.Decode(keyPEM)
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil || !priv.(*ecdsa.PrivateKey).PublicKey.Equal(pub) {
		t.Fatalf("key: %v", err)
	}

	// Before beginRefreshAt (+ up to 5 minutes' jitter) nothing; after, a
	// second request, the first credentials still served.
	clk.Step(30 * time.Minute)
	if _, err := m.handle(ctx, k); err != nil || lastRequest(t, client).Name != "req-1" {
		t.Fatalf("refreshed early: %v", err)
	}
	clk.Step(36 * time.Minute)
	if _, err := m.handle(ctx, k); err != nil {
		t.Fatal(err)
	}
	refresh := lastRequest(t, client)
	if refresh.Name != "req-2" {
		t.Fatalf("no refresh request")
	}
	if _, got, err := m.CredentialBundle("ns", "p", "pod-uid", "certs", 1); err != nil || string(got) != chain {
		t.Fatalf("while refreshing: %q %v", got, err)
	}
	// Denied: for good, with the kubelet's event and error.
	refresh.Status.Conditions = []metav1.Condition{{Type: certificatesv1beta1.PodCertificateRequestConditionTypeDenied, Status: metav1.ConditionTrue, Reason: "Nope", Message: "no"}}
	if err := idx.Add(refresh); err != nil {
		t.Fatal(err)
	}
	if changed, err := m.handle(ctx, k); !changed || err != nil {
		t.Fatalf("denied: %v %v", changed, err)
	}
	if _, _, err := m.CredentialBundle("ns", "p", "pod-uid", "certs", 1); err == nil || err.Error() != `PodCertificateRequest was permanently denied: reason="Nope" message="no"` {
		t.Fatalf("denied: %v", err)
	}
	if len(ev.reasons) != 1 || ev.reasons[0] != "Denied" {
		t.Fatalf("events %v", ev.reasons)
	}
	m.ForgetPod("pod-uid")
	if len(m.store) != 0 {
		t.Fatal("forgotten pod's credentials kept")
	}
}

// A request that vanished is made again once 10 minutes (+ jitter) have
// passed, not before (informer lag).
func TestManagerAbandonedRequest(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	m, client, _, _ := testManager(t, certPod(), clk)
	k := key{Namespace: "ns", PodName: "p", PodUID: "pod-uid", VolumeName: "certs", SourceIndex: 1}
	if _, err := m.handle(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := m.handle(ctx, k); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("not in the cache yet: %v", err)
	}
	clk.Step(16 * time.Minute)
	if _, err := m.handle(ctx, k); err == nil || !strings.Contains(err.Error(), "appears to have been deleted") {
		t.Fatalf("abandoned: %v", err)
	}
	if _, err := m.handle(ctx, k); err != nil || lastRequest(t, client).Name != "req-2" {
		t.Fatalf("made again: %v", err)
	}
}

func TestGenerateKeyAndProof(t *testing.T) {
	msg := []byte("pod-uid")
	sum := sha256.Sum256(msg)
	for _, kt := range []string{"ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519", "RSA3072"} {
		_, pub, sig, err := generateKeyAndProof(kt, msg)
		if err != nil {
			t.Fatalf("%s: %v", kt, err)
		}
		var ok bool
		switch p := pub.(type) {
		case *ecdsa.PublicKey:
			ok = ecdsa.VerifyASN1(p, sum[:], sig)
		case ed25519.PublicKey:
			ok = ed25519.Verify(p, msg, sig)
		case *rsa.PublicKey:
			ok = rsa.VerifyPSS(p, crypto.SHA256, sum[:], sig, nil) == nil
		}
		if !ok {
			t.Errorf("%s: proof does not verify", kt)
		}
	}
	if _, _, _, err := generateKeyAndProof("DSA", msg); err == nil || err.Error() != `unknown key type "DSA"` {
		t.Errorf("unknown: %v", err)
	}
}

func TestCleanCertificateChain(t *testing.T) {
	in := "text\n-----BEGIN CERTIFICATE-----\nHeader: x\n\nAQID\n-----END CERTIFICATE-----\nmore\n-----BEGIN OTHER-----\nBAUG\n-----END OTHER-----\n"
	want := "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n"
	if got := string(cleanCertificateChain([]byte(in))); got != want {
		t.Fatalf("got %q", got)
	}
}

// Without the API (an API server with the gate off) the manager says so to
// every pod that asks, rather than run an informer that fails for ever.
func TestManagerAPIUnserved(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	m, client, _, _ := testManager(t, certPod(), clk)
	disc := client.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "certificates.k8s.io/v1beta1",
		APIResources: []metav1.APIResource{{Name: "clustertrustbundles"}}}}
	if why := m.apiUnserved(context.Background()); why != "the API server serves no certificates.k8s.io/v1beta1 PodCertificateRequests" {
		t.Fatalf("unserved: %q", why)
	}
	disc.Resources[0].APIResources = append(disc.Resources[0].APIResources, metav1.APIResource{Name: "podcertificaterequests"})
	if why := m.apiUnserved(context.Background()); why != "" {
		t.Fatalf("served: %q", why)
	}
	m.unserved = "the API server serves no certificates.k8s.io/v1beta1 PodCertificateRequests"
	if _, _, err := m.CredentialBundle("ns", "p", "pod-uid", "certs", 1); err == nil || err.Error() != m.unserved {
		t.Fatalf("asked: %v", err)
	}
}

package podspec

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	lrucache "k8s.io/apimachinery/pkg/util/cache"
	certlisters "k8s.io/client-go/listers/certificates/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func testCA(t *testing.T, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1e9, 0), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func ders(t *testing.T, b []byte) map[string]int {
	t.Helper()
	out := map[string]int{}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		out[string(blk.Bytes)]++
	}
}

func testTrustBundles(t *testing.T, ctbs ...*certificatesv1beta1.ClusterTrustBundle) *trustBundleInformer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range ctbs {
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	return &trustBundleInformer{synced: func() bool { return true }, lister: certlisters.NewClusterTrustBundleLister(idx),
		cache: lrucache.NewLRUExpireCache(10)}
}

// The kubelet's InformerManager: by name, by signer and selector (each
// certificate once over the matching bundles, other signers' left out),
// optional sources empty, the kubelet's errors otherwise.
func TestTrustBundles(t *testing.T) {
	ca1, ca2, ca3 := testCA(t, "1"), testCA(t, "2"), testCA(t, "3")
	m := testTrustBundles(t,
		&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{TrustBundle: ca1 + "junk between\n" + ca1}},
		&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "x:s:a", Labels: map[string]string{"k": "v"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: "x/s", TrustBundle: ca1 + ca2}},
		&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "x:s:b", Labels: map[string]string{"k": "v"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: "x/s", TrustBundle: ca2}},
		&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "x:s:c", Labels: map[string]string{"k": "w"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: "x/s", TrustBundle: ca3}},
		&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "y:t:a", Labels: map[string]string{"k": "v"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: "y/t", TrustBundle: ca3}},
	)
	got, err := m.ByName("plain", false)
	if err != nil || string(got) != ca1 {
		t.Fatalf("by name: %q, %v", got, err)
	}
	got, err = m.BySigner("x/s", &metav1.LabelSelector{MatchLabels: map[string]string{"k": "v"}}, false)
	if d := ders(t, got); err != nil || len(d) != 2 || d[string(mustDER(t, ca1))] != 1 || d[string(mustDER(t, ca2))] != 1 {
		t.Fatalf("by signer: %q, %v", got, err)
	}
	// A nil selector matches nothing (metav1's rule), an empty one all.
	if _, err := m.BySigner("x/s", nil, false); err == nil || err.Error() != "combination of signerName and labelSelector matched zero ClusterTrustBundles" {
		t.Fatalf("nil selector: %v", err)
	}
	got, err = m.BySigner("x/s", &metav1.LabelSelector{}, false)
	if d := ders(t, got); err != nil || len(d) != 3 {
		t.Fatalf("empty selector: %d certificates, %v", len(d), err)
	}
	if got, err := m.BySigner("z/none", &metav1.LabelSelector{}, true); err != nil || len(got) != 0 {
		t.Fatalf("optional signer: %q, %v", got, err)
	}
	if got, err := m.ByName("missing", true); err != nil || len(got) != 0 {
		t.Fatalf("optional name: %q, %v", got, err)
	}
	if _, err := m.ByName("missing", false); err == nil || !strings.HasPrefix(err.Error(), "while getting ClusterTrustBundle: ") {
		t.Fatalf("missing name: %v", err)
	}
	// Cached until a bundle of the signer changes.
	m.lister = certlisters.NewClusterTrustBundleLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	if got, err := m.ByName("plain", false); err != nil || string(got) != ca1 {
		t.Fatalf("cached by name: %q, %v", got, err)
	}
	m.dropFor(&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	if _, err := m.ByName("plain", false); err == nil {
		t.Fatal("by name after the bundle went: still served")
	}
	m.synced = func() bool { return false }
	if _, err := m.ByName("plain", true); err == nil || err.Error() != "ClusterTrustBundle informer has not yet synced" {
		t.Fatalf("not synced: %v", err)
	}
}

func mustDER(t *testing.T, s string) []byte {
	t.Helper()
	b, _ := pem.Decode([]byte(s))
	if b == nil {
		t.Fatal("no PEM")
	}
	return b.Bytes
}

// The projected file: the gate off is the kubelet's no-manager error;
// mode is the volume's, 0600 with an fsGroup; one of name or signerName.
func TestTrustBundleFiles(t *testing.T) {
	ca := testCA(t, "1")
	pod := &v1.Pod{}
	src := &v1.ClusterTrustBundleProjection{Name: ptr.To("plain"), Path: "ca.pem"}
	r := &Runtime{}
	if _, err := r.trustBundleFiles(pod, src, ptr.To(int32(0o644))); err == nil || err.Error() != "ClusterTrustBundle projection is not supported in static kubelet mode" {
		t.Fatalf("gate off: %v", err)
	}
	r.cfg.TrustBundles = testTrustBundles(t, &certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: certificatesv1beta1.ClusterTrustBundleSpec{TrustBundle: ca}})
	files, err := r.trustBundleFiles(pod, src, ptr.To(int32(0o644)))
	if err != nil || string(files["ca.pem"].Data) != ca || files["ca.pem"].Mode != 0o644 {
		t.Fatalf("files %+v, %v", files, err)
	}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(3000))}
	if files, _ := r.trustBundleFiles(pod, src, ptr.To(int32(0o644))); files["ca.pem"].Mode != 0o600 {
		t.Fatalf("fsGroup: mode %o", files["ca.pem"].Mode)
	}
	if _, err := r.trustBundleFiles(pod, &v1.ClusterTrustBundleProjection{Path: "x"}, nil); err == nil || err.Error() != "ClusterTrustBundle projection requires either name or signerName to be set" {
		t.Fatalf("neither: %v", err)
	}
}

package join

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

func selfSignedCA(t *testing.T) *x509.Certificate {
	t.Helper()
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "test-ca"}, key.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestPins(t *testing.T) {
	ca := selfSignedCA(t)
	other := selfSignedCA(t)
	h := CAHash(ca)
	if !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+64 {
		t.Fatalf("CAHash = %q", h)
	}
	p, err := parsePins([]string{strings.ToUpper(h[:7]) + strings.ToUpper(h[7:])})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.matchAny([]*x509.Certificate{other, ca}); err != nil {
		t.Errorf("pinned CA not matched: %v", err)
	}
	if err := p.matchAny([]*x509.Certificate{other}); err == nil || !strings.Contains(err.Error(), CAHash(other)) {
		t.Errorf("unpinned CA: err = %v, want one naming its hash", err)
	}
	for _, bad := range []string{"", "sha256", "md5:" + h[7:], "sha256:abc", "sha256:" + strings.Repeat("zz", 32)} {
		if _, err := parsePins([]string{bad}); err == nil {
			t.Errorf("parsePins(%q) accepted", bad)
		}
	}
	// The pin is of the key, as kubeadm's: the PEM round trip keeps it.
	again, err := certutil.ParseCertsPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
	if err != nil || CAHash(again[0]) != h {
		t.Errorf("hash changed across PEM: %v", err)
	}
}

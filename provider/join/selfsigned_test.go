package join

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"
)

// The pair loads as a TLS server certificate, its leaf names the host and
// is signed by the CA that follows it, each with a P-256 key.
func TestSelfSignedServing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, host := range []string{"node-a", "10.0.0.7"} {
		certPEM, keyPEM, err := selfSignedServing(host, now)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatalf("%s: not a TLS pair: %v", host, err)
		}
		if len(pair.Certificate) != 2 {
			t.Fatalf("%s: %d certificates in the chain, want the leaf and its CA", host, len(pair.Certificate))
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		ca, err := x509.ParseCertificate(pair.Certificate[1])
		if err != nil {
			t.Fatal(err)
		}
		if !ca.IsCA || leaf.IsCA {
			t.Errorf("%s: CA flags: chain CA %v, leaf %v", host, ca.IsCA, leaf.IsCA)
		}
		for _, c := range []*x509.Certificate{leaf, ca} {
			pub, ok := c.PublicKey.(*ecdsa.PublicKey)
			if !ok || pub.Curve != elliptic.P256() {
				t.Errorf("%s: %s: key %T, want ECDSA P-256", host, c.Subject.CommonName, c.PublicKey)
			}
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s: leaf does not verify against its CA for the host: %v", host, err)
		}
		if got, want := leaf.NotAfter.Sub(leaf.NotBefore), 365*24*time.Hour; got != want {
			t.Errorf("%s: valid for %v, want %v", host, got, want)
		}
		if !leaf.NotBefore.Before(now) {
			t.Errorf("%s: not valid at its making (%v), want an hour's slack", host, leaf.NotBefore)
		}
	}
}

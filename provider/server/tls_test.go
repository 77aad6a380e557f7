package server

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
)

func writePair(t *testing.T, certFile, keyFile, host string) {
	t.Helper()
	cert, key, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Replaced as tools replace them: a new file renamed over the old.
	for path, b := range map[string][]byte{certFile: cert, keyFile: key} {
		if err := os.WriteFile(path+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
}

func subjectOf(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	if c == nil {
		t.Fatal("no certificate")
	}
	// tls.X509KeyPair fills Leaf in; the self-signed CN is host@time.
	host, _, _ := strings.Cut(c.Leaf.Subject.CommonName, "@")
	return host
}

func TestFileCertificateReloads(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, certFile, keyFile, "first")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := NewFileCertificate(ctx, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	get := getCertificate(f)
	cert, err := get(nil)
	if err != nil || subjectOf(t, cert) != "first" {
		t.Fatalf("served %v (%v); want the first pair", subjectOf(t, cert), err)
	}

	writePair(t, certFile, keyFile, "second")
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cert, err := get(nil)
		return err == nil && subjectOf(t, cert) == "second", nil
	})
	if err != nil {
		t.Fatal("the replaced pair was never served")
	}

	// A key that does not match the certificate is not taken.
	other := filepath.Join(dir, "other.key")
	writePair(t, filepath.Join(dir, "other.crt"), other, "other")
	b, _ := os.ReadFile(other)
	if err := os.WriteFile(keyFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f.Enqueue()
	if cert, _ := get(nil); subjectOf(t, cert) != "second" {
		t.Fatal("a mismatched key replaced the served pair")
	}
}

func TestFileCertificateRefusesNoPair(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewFileCertificate(context.Background(), filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key")); err == nil {
		t.Fatal("missing files accepted")
	}
}

type noCert struct{}

func (noCert) Current() *tls.Certificate { return nil }

func TestNoCertificateYet(t *testing.T) {
	if _, err := getCertificate(noCert{})(nil); !errors.Is(err, errNoCertificate) {
		t.Fatalf("got %v, want %v", err, errNoCertificate)
	}
}

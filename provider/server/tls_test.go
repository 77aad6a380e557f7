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

// The kubelet's tlsMinVersion and tlsCipherSuites, read by name with the
// kubelet's warnings, and served: a client below the minimum or without
// one of the suites fails its handshake.
func TestTLSSettings(t *testing.T) {
	if _, _, err := ParseTLS("VersionTLS9", nil); err == nil {
		t.Error("an unknown version was taken")
	}
	if _, _, err := ParseTLS("", []string{"TLS_NO_SUCH_SUITE"}); err == nil {
		t.Error("an unknown suite was taken")
	}
	if got, _, _ := ParseTLS("", nil); got.minVersion() != tls.VersionTLS12 || got.CipherSuites != nil {
		t.Errorf("defaults %+v", got)
	}
	_, warnings, err := ParseTLS("VersionTLS13", []string{"TLS_RSA_WITH_RC4_128_SHA"})
	if err != nil || len(warnings) != 2 {
		t.Errorf("TLS 1.3 with an insecure suite: %q %v, want two warnings", warnings, err)
	}

	// Served as Serve's tls.Config takes them.
	serve := func(t *testing.T, s TLS) string {
		cert, key, err := certutil.GenerateSelfSignedCertKey("node", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: s.minVersion(), CipherSuites: s.CipherSuites})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	dial := func(addr string, cfg *tls.Config) error {
		cfg.InsecureSkipVerify = true
		c, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	only13, _, _ := ParseTLS("VersionTLS13", nil)
	addr := serve(t, only13)
	if err := dial(addr, &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("a TLS 1.2 client was served under tlsMinVersion VersionTLS13")
	}
	if err := dial(addr, &tls.Config{}); err != nil {
		t.Errorf("a TLS 1.3 client: %v", err)
	}
	one, _, _ := ParseTLS("", []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"})
	addr = serve(t, one)
	if err := dial(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}}); err == nil {
		t.Error("a suite outside tlsCipherSuites was served")
	}
	if err := dial(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}); err != nil {
		t.Errorf("the suite of tlsCipherSuites: %v", err)
	}
}

package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"

	log "github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	cliflag "k8s.io/component-base/cli/flag"
)

// Certificate is the serving certificate of the moment: a certificate
// manager's (--rotate-server-certificates, client-go's certificate.Manager)
// or FileCertificate's. It is asked on every TLS handshake, so a rotated or
// replaced certificate is served without a restart, as the kubelet's is.
type Certificate interface {
	Current() *tls.Certificate
}

// errNoCertificate is what a handshake gets before the first certificate
// is issued (the kubelet's message).
var errNoCertificate = errors.New("no serving certificate available for the kubelet")

func getCertificate(c Certificate) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert := c.Current(); cert != nil {
			return cert, nil
		}
		return nil, errNoCertificate
	}
}

// FileCertificate serves the pair in certFile and keyFile (--tls-cert-file,
// --tls-private-key-file) and loads it again when either file changes, as
// the kubelet's ReloadKubeletServerCertificateFile does; a pair that does
// not load leaves the last good one in use.
type FileCertificate struct {
	content *dynamiccertificates.DynamicCertKeyPairContent
	current atomic.Pointer[tls.Certificate]
}

// NewFileCertificate loads the pair, failing if it does not make one, and
// watches the files until ctx ends.
func NewFileCertificate(ctx context.Context, certFile, keyFile string) (*FileCertificate, error) {
	content, err := dynamiccertificates.NewDynamicServingContentFromFiles("kubelet-server-cert-files", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	f := &FileCertificate{content: content}
	f.Enqueue()
	content.AddListener(f)
	go content.Run(ctx, 1)
	return f, nil
}

// Enqueue takes the files' new content (dynamiccertificates.Listener).
func (f *FileCertificate) Enqueue() {
	certPEM, keyPEM := f.content.CurrentCertKeyContent()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		log.WithError(err).Error("serving certificate files do not make a pair: keeping the last one")
		return
	}
	if f.current.Swap(&cert) != nil {
		log.WithField("files", f.content.Name()).Info("serving certificate reloaded")
	}
}

// Current is the last pair that loaded.
func (f *FileCertificate) Current() *tls.Certificate { return f.current.Load() }

// TLS is what the kubelet API's TLS accepts, as the kubelet's tlsMinVersion
// and tlsCipherSuites (their IDs; ParseTLS reads the names).
type TLS struct {
	// MinVersion is the lowest version served; zero: TLS 1.2.
	MinVersion uint16
	// CipherSuites are those served up to TLS 1.2 (TLS 1.3's are not
	// configurable in Go); none: Go's defaults.
	CipherSuites []uint16
}

func (t TLS) minVersion() uint16 {
	if t.MinVersion == 0 {
		return tls.VersionTLS12
	}
	return t.MinVersion
}

// ParseTLS reads the kubelet's --tls-min-version and --tls-cipher-suites
// (names as component-base's flags take them), with the kubelet's warnings:
// insecure suites named, and suites given with a TLS 1.3 minimum, which
// leaves them unused.
func ParseTLS(minVersion string, suites []string) (t TLS, warnings []string, err error) {
	if t.CipherSuites, err = cliflag.TLSCipherSuites(suites); err != nil {
		return t, nil, fmt.Errorf("--tls-cipher-suites: %w", err)
	}
	if t.MinVersion, err = cliflag.TLSVersion(minVersion); err != nil {
		return t, nil, fmt.Errorf("--tls-min-version: %w", err)
	}
	insecure := cliflag.InsecureTLSCiphers()
	for _, name := range suites {
		if _, ok := insecure[name]; ok {
			warnings = append(warnings, "the kubelet API serves an insecure cipher suite: "+name)
		}
	}
	if t.MinVersion == tls.VersionTLS13 && len(t.CipherSuites) > 0 {
		warnings = append(warnings, "TLS 1.3 cipher suites are not configurable: --tls-cipher-suites is ignored")
	}
	if t.MinVersion != 0 && t.MinVersion < tls.VersionTLS12 {
		warnings = append(warnings, "the kubelet API serves TLS older than 1.2 (--tls-min-version "+minVersion+")")
	}
	return t, warnings, nil
}

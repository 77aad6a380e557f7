package join

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	netutils "k8s.io/utils/net"
)

// selfSignedServing is the kubelet's self-signed serving pair as
// certutil.GenerateSelfSignedCertKey makes it (a CA "<host>-ca@<unix>" and
// a server certificate for host it signs, a year from an hour ago, the
// certificate then the CA in one PEM), with ECDSA P-256 keys rather than
// RSA 2048: two RSA keys cost 100-300 ms of a join's CPU, on its critical
// path, where P-256 costs well under a millisecond. P-256 is what the
// kubelet's own certificate requests use; every TLS client of the kubelet
// API (the API server, metrics-server, Prometheus) speaks it.
func selfSignedServing(host string, now time.Time) (certPEM, keyPEM []byte, err error) {
	validFrom := now.Add(-time.Hour) // an hour earlier, as certutil: clock skew
	validTo := validFrom.Add(365 * 24 * time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", host, now.Unix())},
		NotBefore:             validFrom,
		NotAfter:              validTo,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if caTemplate.SerialNumber, err = serialNumber(); err != nil {
		return nil, nil, err
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	// No key encipherment: an ECDSA key only signs (the kubelet's serving
	// CSRs ask for it with RSA keys only).
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", host, now.Unix())},
		NotBefore:             validFrom,
		NotAfter:              validTo,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if template.SerialNumber, err = serialNumber(); err != nil {
		return nil, nil, err
	}
	if ip := netutils.ParseIPSloppy(host); ip != nil {
		template.IPAddresses = append(template.IPAddresses, ip)
	} else {
		template.DNSNames = append(template.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	var certs bytes.Buffer
	for _, d := range [][]byte{der, caDER} {
		if err := pem.Encode(&certs, &pem.Block{Type: certutil.CertificateBlockType, Bytes: d}); err != nil {
			return nil, nil, err
		}
	}
	return certs.Bytes(), pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: keyDER}), nil
}

// serialNumber is uniform in [1, MaxInt64), as certutil's.
func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64-1))
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil
}

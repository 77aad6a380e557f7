package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the cluster CA (kept in memory to mint more certificates later,
// e.g. node identities) and the paths of the files the components read.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte

	CACert, CAKey                       string
	APIServerCert, APIServerKey         string
	AdminCert, AdminKey                 string
	KubeletClientCert, KubeletClientKey string
	SAKey, SAPub                        string
	// The aggregation layer's client identity (see frontProxyClientCN).
	FrontProxyClientCert, FrontProxyClientKey string
}

// frontProxyClientCN is the identity the API server proxies to extension API
// servers (metrics-server) with; they accept request headers only from it.
const frontProxyClientCN = "front-proxy-client"

// certSpec describes one leaf certificate.
type certSpec struct {
	cn     string
	orgs   []string
	ips    []net.IP
	dns    []string
	client bool
	server bool
	// validFor is the lifetime from NotBefore (an hour ago); 0: a year.
	validFor time.Duration
}

// newPKI creates the CA, the apiserver's serving and kubelet-client certs,
// the admin cert and the service-account key pair under dir. The apiserver's
// cert is valid for 127.0.0.1 and ips.
func newPKI(dir string, ips ...net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "hostlet-harness-ca"},
		NotBefore:             now.Add(-time.Hour), // tolerate small clock skew
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, caCert: ca, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	p.CACert, p.CAKey = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.WriteFile(p.CACert, p.caPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeKey(p.CAKey, key); err != nil {
		return nil, err
	}

	if p.APIServerCert, p.APIServerKey, err = p.issueFiles("apiserver", certSpec{
		cn:     "kube-apiserver",
		server: true,
		ips:    append([]net.IP{net.ParseIP("127.0.0.1")}, ips...),
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return nil, err
	}
	if p.AdminCert, p.AdminKey, err = p.issueFiles("admin", certSpec{cn: "admin", orgs: []string{"system:masters"}, client: true}); err != nil {
		return nil, err
	}
	if p.KubeletClientCert, p.KubeletClientKey, err = p.issueFiles("apiserver-kubelet-client", certSpec{
		cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true,
	}); err != nil {
		return nil, err
	}

	// The cluster CA also signs the front proxy's client cert (kubeadm has a
	// CA of its own for it): --requestheader-allowed-names keeps other
	// clients of this CA from asserting identities in headers.
	if p.FrontProxyClientCert, p.FrontProxyClientKey, err = p.issueFiles("front-proxy-client", certSpec{
		cn: frontProxyClientCN, client: true,
	}); err != nil {
		return nil, err
	}

	// Service-account tokens are signed by the apiserver (TokenRequest) and
	// by the controller-manager (legacy), verified with the public half.
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.SAKey, p.SAPub = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeKey(p.SAKey, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs a new leaf certificate with the CA and returns PEM cert and key.
func (p *pki) issue(s certSpec) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	if s.validFor == 0 {
		s.validFor = 365*24*time.Hour + time.Hour
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(-time.Hour + s.validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		IPAddresses:  s.ips,
		DNSNames:     s.dns,
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// issueFiles issues a certificate and writes it to <dir>/<name>.crt/.key.
func (p *pki) issueFiles(name string, s certSpec) (certFile, keyFile string, err error) {
	c, k, err := p.issue(s)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err := os.WriteFile(certFile, c, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, k, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return n
}

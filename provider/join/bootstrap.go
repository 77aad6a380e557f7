package join

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

// bootstrapClient authenticates with the bootstrap token over TLS verified
// with the discovered CA.
func bootstrapClient(c *Cluster, token string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(&rest.Config{
		Host: c.Server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM},
		UserAgent: "hostlet-join", Timeout: 30 * time.Second,
	})
}

// RequestClientCert is the kubelet's TLS bootstrap: a new key, a CSR for
// system:node:<name> in system:nodes to the kube-apiserver-client-kubelet
// signer, and the certificate once the controller-manager approved (the
// chart's nodeclient binding) and signed it.
func RequestClientCert(ctx context.Context, client kubernetes.Interface, nodeName string, timeout time.Duration) (certPEM, keyPEM []byte, err error) {
	keyPEM, err = keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, err
	}
	subject := &pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
	csrPEM, err := certutil.MakeCSR(key, subject, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the node's CSR with the bootstrap token: %w (is the hostlet chart installed?)", err)
	}
	log.WithFields(log.Fields{"csr": name, "node": nodeName}).Info("waiting for the client certificate to be approved and issued")
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	certPEM, err = csr.WaitForCertificate(wctx, client, name, uid)
	if err != nil {
		return nil, nil, fmt.Errorf("CSR %s was not issued: %w (does the controller-manager run csrapproving/csrsigning with the cluster CA, and is the token's group bound to certificatesigningrequests:nodeclient?)", name, err)
	}
	return certPEM, keyPEM, nil
}

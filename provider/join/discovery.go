package join

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	tokenjws "k8s.io/cluster-bootstrap/token/jws"
	bootstraptokens "k8s.io/cluster-bootstrap/util/tokens"
)

// Cluster is what discovery established: the API server and the CA that
// signs its certificate, trusted through the token and the CA pin.
type Cluster struct {
	Server string
	CAPEM  []byte
}

// DiscoveryConfig is what `hostlet join` was given.
type DiscoveryConfig struct {
	Server   string
	Token    string   // "<id>.<secret>"
	CAHashes []string // "sha256:<hex>", at least one
	// Timeout bounds waiting for the server and for the signature of the
	// token (the bootstrapsigner adds it shortly after the token appears).
	Timeout time.Duration
}

// discoveryInterval is how often cluster-info is fetched again while the
// server is unreachable or the token's signature is missing.
const discoveryInterval = 2 * time.Second

// Discover reads kube-public/cluster-info as kubeadm does: first without
// trusting the server (anonymous, unverified TLS), then checks the JWS
// signature the token's secret makes over its kubeconfig and that the CA in
// it has a pinned public key, then reads it again over TLS verified with that
// CA and requires the same content.
func Discover(ctx context.Context, cfg DiscoveryConfig) (*Cluster, error) {
	id, secret, err := bootstraptokens.ParseToken(cfg.Token)
	if err != nil {
		return nil, fmt.Errorf("--token: %w", err)
	}
	if len(cfg.CAHashes) == 0 {
		return nil, errors.New("--discovery-token-ca-cert-hash is required: it is how this host knows the cluster is yours (see the chart's NOTES)")
	}
	pinned, err := parsePins(cfg.CAHashes)
	if err != nil {
		return nil, err
	}
	insecure := &rest.Config{Host: cfg.Server, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 10 * time.Second}
	cm, err := fetchClusterInfo(ctx, insecure, id, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	kubeconfig := cm.Data[bootstrapapi.KubeConfigKey]
	if !tokenjws.DetachedTokenIsValid(cm.Data[bootstrapapi.JWSSignatureKeyPrefix+id], kubeconfig, id, secret) {
		return nil, fmt.Errorf("the cluster-info signature for token %q does not verify with this token's secret: wrong token, or not the cluster you think", id)
	}
	caPEM, err := clusterInfoCA(kubeconfig)
	if err != nil {
		return nil, err
	}
	cas, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster-info: the CA does not parse: %w", err)
	}
	if err := pinned.matchAny(cas); err != nil {
		return nil, fmt.Errorf("refusing to trust %s: %w", cfg.Server, err)
	}

	secure := &rest.Config{Host: cfg.Server, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, Timeout: 10 * time.Second}
	again, err := fetchClusterInfo(ctx, secure, id, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("with the verified CA: %w", err)
	}
	if again.Data[bootstrapapi.KubeConfigKey] != kubeconfig {
		return nil, errors.New("cluster-info read over verified TLS differs from the first read: refusing")
	}
	log.WithFields(log.Fields{"server": cfg.Server, "ca": CAHash(cas[0])}).Info("cluster-info verified: token signature and CA pin")
	return &Cluster{Server: cfg.Server, CAPEM: caPEM}, nil
}

// fetchClusterInfo gets cluster-info until it carries a signature for the
// token id, or timeout, and then reports the last failure in words.
func fetchClusterInfo(ctx context.Context, cfg *rest.Config, id string, timeout time.Duration) (*v1.ConfigMap, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API server %q: %w", cfg.Host, err)
	}
	// Each try runs to its own end (the client's timeout), not to the
	// overall deadline, so the last failure is the server's, not the clock's.
	deadline := time.Now().Add(timeout)
	for {
		cm, last := tryClusterInfo(ctx, client, cfg.Host, id)
		if last == nil {
			return cm, nil
		}
		log.WithError(last).Debug("discovery: retrying")
		if time.Now().Add(discoveryInterval).After(deadline) {
			return nil, last
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(discoveryInterval):
		}
	}
}

// tryClusterInfo is one read of cluster-info, and what is wrong with it.
func tryClusterInfo(ctx context.Context, client kubernetes.Interface, host, id string) (*v1.ConfigMap, error) {
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	switch {
	case err != nil:
		return nil, fmt.Errorf("cannot read %s/%s from %s: %w", metav1.NamespacePublic, bootstrapapi.ConfigMapClusterInfo, host, err)
	case cm.Data[bootstrapapi.KubeConfigKey] == "":
		return nil, fmt.Errorf("%s/%s has no kubeconfig: the cluster is not set up for joining (install the hostlet chart)", metav1.NamespacePublic, bootstrapapi.ConfigMapClusterInfo)
	case cm.Data[bootstrapapi.JWSSignatureKeyPrefix+id] == "":
		return nil, fmt.Errorf("token %q is not valid for this cluster or has expired (cluster-info has no signature for it; is the controller-manager's bootstrapsigner running?)", id)
	}
	return cm, nil
}

// clusterInfoCA is the CA of the one cluster in cluster-info's kubeconfig.
func clusterInfoCA(kubeconfig string) ([]byte, error) {
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("cluster-info: the kubeconfig does not parse: %w", err)
	}
	if len(cfg.Clusters) != 1 {
		return nil, fmt.Errorf("cluster-info: want one cluster in its kubeconfig, found %d", len(cfg.Clusters))
	}
	for _, c := range cfg.Clusters {
		if len(bytes.TrimSpace(c.CertificateAuthorityData)) == 0 {
			return nil, errors.New("cluster-info: its kubeconfig has no certificate-authority-data")
		}
		return c.CertificateAuthorityData, nil
	}
	return nil, nil
}

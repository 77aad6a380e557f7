package join

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
)

// rotationCheck is how often the client's connections are checked against
// the manager's current certificate (the kubelet's period).
const rotationCheck = 10 * time.Second

// RotatingClientConfig is the API client config of kubeconfig. When its
// client certificate and key are one "<prefix>-current.pem" file, as join
// writes them, the certificate is kept fresh by client-go's certificate
// manager as the kubelet's is: a new key and a CSR for the same node
// identity (approved through the selfnodeclient role) at 70-90% of the
// lifetime, stored beside the old one, and connections closed once it is
// in use so new ones present it; watches resume from their resource
// version. Any other kubeconfig is returned as it is.
func RotatingClientConfig(ctx context.Context, kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	pair := cfg.CertFile
	if pair == "" || pair != cfg.KeyFile || !strings.HasSuffix(pair, "-current.pem") {
		return cfg, nil
	}
	// The store writes beside the symlink; its prefix is the file's name.
	dir := filepath.Dir(pair)
	store, err := certificate.NewFileStore(strings.TrimSuffix(filepath.Base(pair), "-current.pem"), dir, dir, "", "")
	if err != nil {
		return nil, err
	}
	current, err := store.Current()
	if err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", pair, err)
	}
	subject := current.Leaf.Subject
	if !strings.HasPrefix(subject.CommonName, "system:node:") {
		return nil, fmt.Errorf("client certificate %s is for %q, not a node", pair, subject.CommonName)
	}

	rotating := rest.CopyConfig(cfg)
	var clientErr error
	var clientOnce sync.Once
	var client kubernetes.Interface
	manager, err := certificate.NewManager(&certificate.Config{
		Name: "hostlet-client",
		// The node's own (current) certificate asks for the next one.
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) {
			clientOnce.Do(func() { client, clientErr = kubernetes.NewForConfig(rotating) })
			return client, clientErr
		},
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: subject.CommonName, Organization: []string{"system:nodes"}},
		},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:           []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		CertificateStore: store,
		Ctx:              &ctx,
	})
	if err != nil {
		return nil, err
	}
	if err := useManager(ctx, rotating, manager); err != nil {
		return nil, err
	}
	manager.Start()
	go func() { <-ctx.Done(); manager.Stop() }()
	log.WithFields(log.Fields{"certificate": pair, "expires": current.Leaf.NotAfter}).Info("client certificate rotation on")
	return rotating, nil
}

// useManager makes cfg present the manager's current certificate and drop
// its connections when that changes, as the kubelet's transport does.
func useManager(ctx context.Context, cfg *rest.Config, manager certificate.Manager) error {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return err
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := manager.Current(); c != nil {
			return c, nil
		}
		return &tls.Certificate{}, nil
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	last := manager.Current()
	go wait.UntilWithContext(ctx, func(context.Context) {
		if cur := manager.Current(); cur != nil && cur != last {
			last = cur
			log.WithField("expires", cur.Leaf.NotAfter).Info("client certificate rotated: reconnecting with it")
			dialer.CloseAll()
		}
	}, rotationCheck)
	cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         dialer.DialContext,
	})
	// The transport carries TLS now; client-go refuses both.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	return nil
}

package join

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sort"

	log "github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
	netutils "k8s.io/utils/net"
	"sigs.k8s.io/yaml"
)

// ServingConfig is the node's serving certificate under
// --rotate-server-certificates.
type ServingConfig struct {
	NodeName string
	Client   kubernetes.Interface
	// Addresses are the Node's status addresses as the API has them: the
	// certificate names them, and an approver checks it against the same.
	Addresses func() []v1.NodeAddress
	// CertDir holds kubelet-server-current.pem (<root-dir>/pki, the
	// kubelet's --cert-dir).
	CertDir string
	// CertFile and KeyFile (--tls-cert-file, --tls-private-key-file) are
	// served until the first certificate is issued, if given.
	CertFile, KeyFile string
}

// servingPairPrefix names the serving pair files as the kubelet does.
const servingPairPrefix = "kubelet-server"

// ServingCertManager is the kubelet's NewKubeletServerCertificateManager:
// kubernetes.io/kubelet-serving CSRs for system:node:<name> in system:nodes
// naming the Node's IPs and DNS names, a new one when the Node's addresses
// change and at 70-90% of the lifetime, kept in
// CertDir/kubelet-server-current.pem. Started; stopped when ctx ends.
func ServingCertManager(ctx context.Context, cfg ServingConfig) (certificate.Manager, error) {
	store, err := certificate.NewFileStore(servingPairPrefix, cfg.CertDir, cfg.CertDir, cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	manager, err := certificate.NewManager(&certificate.Config{
		Name:        "hostlet-server",
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return cfg.Client, nil },
		GetTemplate: func() *x509.CertificateRequest { return ServingTemplate(cfg.NodeName, cfg.Addresses()) },
		SignerName:  certificatesv1.KubeletServingSignerName,
		// Digital signature and server auth, plus key encipherment for RSA keys.
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Ctx:              &ctx,
	})
	if err != nil {
		return nil, err
	}
	manager.Start()
	go func() { <-ctx.Done(); manager.Stop() }()
	log.WithField("store", store.CurrentPath()).Info("serving certificate rotation on: kubelet-serving CSRs")
	return manager, nil
}

// ServingTemplate is the CSR for the node's serving certificate: its IPs
// and DNS names from addresses (the kubelet's addressesToHostnamesAndIPs);
// nil while it has no IP, as the kubelet asks for none then.
func ServingTemplate(nodeName string, addresses []v1.NodeAddress) *x509.CertificateRequest {
	dnsNames, ips := map[string]bool{}, map[string]bool{}
	for _, a := range addresses {
		if a.Address == "" {
			continue
		}
		ip := netutils.ParseIPSloppy(a.Address)
		switch a.Type {
		case v1.NodeHostName:
			if ip != nil {
				ips[ip.String()] = true
			} else {
				dnsNames[a.Address] = true
			}
		case v1.NodeInternalIP, v1.NodeExternalIP:
			if ip != nil {
				ips[ip.String()] = true
			}
		case v1.NodeInternalDNS, v1.NodeExternalDNS:
			dnsNames[a.Address] = true
		}
	}
	if len(ips) == 0 {
		return nil
	}
	req := &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}
	for name := range dnsNames {
		req.DNSNames = append(req.DNSNames, name)
	}
	sort.Strings(req.DNSNames)
	var ipStrings []string
	for ip := range ips {
		ipStrings = append(ipStrings, ip)
	}
	// Sorted, so an unchanged set of addresses is an unchanged template.
	sort.Strings(ipStrings)
	for _, ip := range ipStrings {
		req.IPAddresses = append(req.IPAddresses, net.ParseIP(ip))
	}
	return req
}

// removeServingPairs deletes the serving certificates the cluster issued
// to the node (<root-dir>/pki/kubelet-server-*.pem, root-dir from join's
// flags file, or the flag-keyed config file of an older join): still
// valid, they would be served, unverifiable, after a join to another
// cluster.
func (l Layout) removeServingPairs() error {
	flags, err := ReadFlagsFile(l.FlagsFile())
	if err != nil {
		return err
	}
	rootDir := flags["root-dir"]
	if rootDir == "" {
		b, err := os.ReadFile(l.ConfigFile())
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var settings struct {
			RootDir string `json:"root-dir"`
		}
		// A KubeletConfiguration has no root-dir: nothing to find.
		if err := yaml.Unmarshal(b, &settings); err != nil || settings.RootDir == "" {
			return err
		}
		rootDir = settings.RootDir
	}
	pairs, err := filepath.Glob(filepath.Join(rootDir, "pki", servingPairPrefix+"-*.pem"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pairs {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

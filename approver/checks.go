// Package approver approves kubelet-serving CSRs (kubernetes.io/kubelet-serving
// signer) of nodes, which the controller-manager leaves to others: a CSR is
// approved when a node asks for itself and names only its own addresses,
// and denied with the reason otherwise. It runs in the cluster as `hostlet
// approve-serving` (the chart's servingCertApprover).
package approver

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	netutils "k8s.io/utils/net"
)

// Reasons of a denial, the condition's reason.
const (
	ReasonInvalidRequest    = "InvalidRequest"
	ReasonRequesterNotNode  = "RequesterNotNode"
	ReasonUsagesNotServing  = "UsagesNotServing"
	ReasonNodeNotFound      = "NodeNotFound"
	ReasonSANNotNodeAddress = "SANNotNodeAddress"
)

// ReasonApproved is the condition's reason on approval, the controller-manager's.
const ReasonApproved = "AutoApproved"

const nodePrefix = "system:node:"

// servingUsages are the kubelet's: digital signature and server auth, and
// key encipherment for RSA keys (client-go's DefaultKubeletServingGetUsages).
var servingUsages = []sets.Set[certificatesv1.KeyUsage]{
	sets.New(certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth),
	sets.New(certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth),
}

// Denial is why a CSR is not approved: the reason and message of its
// Denied condition.
type Denial struct {
	Reason, Message string
}

func deny(reason, format string, a ...any) *Denial {
	return &Denial{Reason: reason, Message: fmt.Sprintf(format, a...)}
}

// isPending is a kubelet-serving CSR nobody has decided on.
func isPending(csr *certificatesv1.CertificateSigningRequest) bool {
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || len(csr.Status.Certificate) > 0 {
		return false
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return false
		}
	}
	return true
}

// CheckRequest checks what the CSR alone says, as the kube-apiserver's
// ValidateKubeletServingCSR and the node client approver do: the requester
// is the node system:node:<name> (group system:nodes) the subject names,
// the usages are a kubelet serving certificate's, and the names are DNS
// names or IPs only. It returns the node's name.
func CheckRequest(csr *certificatesv1.CertificateSigningRequest) (string, *x509.CertificateRequest, *Denial) {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "", nil, deny(ReasonInvalidRequest, "spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", nil, deny(ReasonInvalidRequest, "spec.request: %v", err)
	}
	name, ok := strings.CutPrefix(csr.Spec.Username, nodePrefix)
	if !ok || name == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return "", nil, deny(ReasonRequesterNotNode, "requested by %q, not a node in system:nodes", csr.Spec.Username)
	}
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return "", nil, deny(ReasonRequesterNotNode, "subject CN=%q O=%v is not the requester %q in system:nodes",
			req.Subject.CommonName, req.Subject.Organization, csr.Spec.Username)
	}
	usages := sets.New(csr.Spec.Usages...)
	if len(usages) != len(csr.Spec.Usages) || !slices.ContainsFunc(servingUsages, usages.Equal) {
		return "", nil, deny(ReasonUsagesNotServing, "usages %v are not digital signature, key encipherment (optional) and server auth", csr.Spec.Usages)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return "", nil, deny(ReasonInvalidRequest, "email and URI subjectAltNames are not allowed")
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return "", nil, deny(ReasonInvalidRequest, "a DNS or IP subjectAltName is required")
	}
	return name, req, nil
}

// CheckNames checks that every name the request asks for is one of the
// Node's addresses: IPs among its IP (and IP-valued Hostname) addresses,
// DNS names among its Hostname and DNS addresses, as the kubelet fills
// them in (addressesToHostnamesAndIPs).
func CheckNames(req *x509.CertificateRequest, node *v1.Node) *Denial {
	dnsNames := sets.New[string]()
	var ips []string
	for _, a := range node.Status.Addresses {
		ip := netutils.ParseIPSloppy(a.Address)
		switch {
		case ip != nil && (a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP || a.Type == v1.NodeHostName):
			ips = append(ips, ip.String())
		case ip == nil && (a.Type == v1.NodeHostName || a.Type == v1.NodeInternalDNS || a.Type == v1.NodeExternalDNS):
			dnsNames.Insert(a.Address)
		}
	}
	for _, d := range req.DNSNames {
		if !dnsNames.Has(d) {
			return deny(ReasonSANNotNodeAddress, "DNS name %q is not an address of node %s", d, node.Name)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.Contains(ips, ip.String()) {
			return deny(ReasonSANNotNodeAddress, "IP %s is not an address of node %s", ip, node.Name)
		}
	}
	return nil
}

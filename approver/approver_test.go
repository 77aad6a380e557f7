package approver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

var ecUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}

// request is a CSR as a node's certificate manager makes it, changed by edit.
type request struct {
	name     string
	user     string
	groups   []string
	cn       string
	orgs     []string
	dns      []string
	ips      []string
	usages   []certificatesv1.KeyUsage
	signer   string
	rsa      bool
	approved bool
}

func nodeRequest(name string) request {
	return request{name: name, user: "system:node:n1", groups: []string{"system:nodes", "system:authenticated"},
		cn: "system:node:n1", orgs: []string{"system:nodes"}, dns: []string{"n1"}, ips: []string{"10.0.0.5"},
		usages: ecUsages, signer: certificatesv1.KubeletServingSignerName}
}

func (r request) object(t *testing.T) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var key any
	var err error
	if r.rsa {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: r.cn, Organization: r.orgs}, DNSNames: r.dns}
	for _, ip := range r.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: r.name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: r.signer, Usages: r.usages, Username: r.user, Groups: r.groups,
		},
	}
	if r.approved {
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue}}
	}
	return csr
}

var node1 = &v1.Node{
	ObjectMeta: metav1.ObjectMeta{Name: "n1"},
	Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: v1.NodeHostName, Address: "n1"}, {Type: v1.NodeInternalDNS, Address: "n1.internal"},
	}},
}

// decision runs the approver on one CSR against a cluster of objs and
// returns the condition it added (nil if none) and Sync's error.
func decision(t *testing.T, csr *certificatesv1.CertificateSigningRequest, client *fake.Clientset) (*certificatesv1.CertificateSigningRequestCondition, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	a.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		t.Fatal("CSR informer did not sync")
	}
	syncErr := a.Sync(ctx, csr.Name)
	got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := len(csr.Status.Conditions)
	if len(got.Status.Conditions) == n {
		return nil, syncErr
	}
	return &got.Status.Conditions[n], syncErr
}

func TestDecisions(t *testing.T) {
	for name, c := range map[string]struct {
		edit   func(*request)
		reason string // "" : left alone
	}{
		"node for its own addresses": {func(*request) {}, ReasonApproved},
		"RSA key with key encipherment": {func(r *request) {
			r.rsa = true
			r.usages = append(r.usages, certificatesv1.UsageKeyEncipherment)
		}, ReasonApproved},
		"external IP and internal DNS": {func(r *request) { r.ips, r.dns = []string{"203.0.113.7"}, []string{"n1.internal"} }, ReasonApproved},
		"IP not the node's":            {func(r *request) { r.ips = append(r.ips, "10.9.9.9") }, ReasonSANNotNodeAddress},
		"DNS name not the node's":      {func(r *request) { r.dns = []string{"kubernetes.default.svc"} }, ReasonSANNotNodeAddress},
		"an IP as a DNS name":          {func(r *request) { r.dns = []string{"10.0.0.5.nip.io"} }, ReasonSANNotNodeAddress},
		"another node's subject":       {func(r *request) { r.cn = "system:node:n2" }, ReasonRequesterNotNode},
		"another node requests":        {func(r *request) { r.user = "system:node:n2" }, ReasonRequesterNotNode},
		"a user requests":              {func(r *request) { r.user, r.groups = "alice", []string{"system:authenticated"} }, ReasonRequesterNotNode},
		"not in system:nodes":          {func(r *request) { r.groups = []string{"system:authenticated"} }, ReasonRequesterNotNode},
		"other organization":           {func(r *request) { r.orgs = []string{"system:masters"} }, ReasonRequesterNotNode},
		"client auth usage": {func(r *request) {
			r.usages = append(r.usages, certificatesv1.UsageClientAuth)
		}, ReasonUsagesNotServing},
		"no server auth":  {func(r *request) { r.usages = r.usages[:1] }, ReasonUsagesNotServing},
		"no names":        {func(r *request) { r.dns, r.ips = nil, nil }, ReasonInvalidRequest},
		"unknown node":    {func(r *request) { r.user, r.cn = "system:node:gone", "system:node:gone" }, ReasonNodeNotFound},
		"another signer":  {func(r *request) { r.signer = certificatesv1.KubeAPIServerClientKubeletSignerName }, ""},
		"decided already": {func(r *request) { r.approved = true }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := nodeRequest("csr-1")
			c.edit(&r)
			cond, err := decision(t, r.object(t), fake.NewClientset(node1.DeepCopy()))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.reason == "" && cond != nil:
				t.Fatalf("decided %s (%s), want it left alone", cond.Type, cond.Reason)
			case c.reason == "":
			case cond == nil:
				t.Fatalf("left pending, want %s", c.reason)
			case cond.Reason != c.reason:
				t.Fatalf("%s %s: %s; want %s", cond.Type, cond.Reason, cond.Message, c.reason)
			case c.reason == ReasonApproved && cond.Type != certificatesv1.CertificateApproved,
				c.reason != ReasonApproved && cond.Type != certificatesv1.CertificateDenied:
				t.Fatalf("condition %s for reason %s", cond.Type, cond.Reason)
			}
		})
	}
}

// A Node that cannot be read leaves the CSR pending, to be tried again.
func TestNodeUnreadableLeavesPending(t *testing.T) {
	client := fake.NewClientset(node1.DeepCopy())
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unavailable")
	})
	cond, err := decision(t, nodeRequest("csr-1").object(t), client)
	if err == nil || cond != nil {
		t.Fatalf("got %v, %v; want an error and no decision", cond, err)
	}
}

package e2e

import (
	"archive/tar"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
)

// approverImage is the image the test runs the chart's approver from: the
// test's own (busybox and a static hostlet), or with
// HOSTLET_APPROVER_ARCHIVE a release's (make release's
// hostlet-image-<version>.oci.tar), named as its index.json says.
func approverImage() (images.Image, error) {
	archive := os.Getenv("HOSTLET_APPROVER_ARCHIVE")
	if archive == "" {
		return images.BuildApprover(context.Background(), filepath.Join(imageCache(), "images"))
	}
	f, err := os.Open(archive)
	if err != nil {
		return images.Image{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return images.Image{}, fmt.Errorf("%s: no index.json: %w", archive, err)
		}
		if hdr.Name != "index.json" {
			continue
		}
		var index ocispec.Index
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return images.Image{}, fmt.Errorf("%s: index.json: %w", archive, err)
		}
		if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] == "" {
			return images.Image{}, fmt.Errorf("%s: want one named image in index.json, found %+v", archive, index.Manifests)
		}
		return images.Image{Ref: index.Manifests[0].Annotations["io.containerd.image.name"], Archive: archive}, nil
	}
}

// servingNode is the node the serving certificate test joins.
const servingNode = "hostlet-serving"

// With the chart's serving-certificate approver on, a host joined with the
// command NOTES print (--rotate-server-certificates) serves a certificate
// the cluster CA issued for its address through an approved kubelet-serving
// CSR, so `kubectl logs` and `exec` work against an API server that
// verifies kubelets (--kubelet-certificate-authority); a renewal replaces
// the served certificate without a restart; a CSR naming an address that is
// not the node's is denied.
func TestServingCertificates(t *testing.T) {
	skipIfNoCluster(t)
	// A cold static build of hostlet for the image takes long on a busy
	// machine: only go test's -timeout bounds it.
	img, err := approverImage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("approver image %s", img.Ref)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin := hostletBinary(t)
	if err := cluster.ImportImage(ctx, img.Archive); err != nil {
		t.Fatal(err)
	}
	client := cluster.Client()

	// The approver runs on the harness's node, in its network namespace
	// (the host's): this cluster has no kube-proxy for the kubernetes
	// Service, so it reaches the API server at its own address.
	values, err := cluster.ApproverValuesFile(t.TempDir(), img.Ref, "  nodeSelector: {kubernetes.io/hostname: "+nodeName+"}\n")
	if err != nil {
		t.Fatal(err)
	}
	const release = "serving"
	chart := installChart(ctx, t, release, "-f", values)
	approverPods := map[string]string{"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "serving-approver"}
	waitRunning(t, "kube-system", approverPods, 1, nodeName)

	const rotate = "rotate-server-certificates=true"
	server, token := chart.joinCommand(t, " --hostlet-arg "+rotate+"\n")
	state := filepath.Join(t.TempDir(), "state")
	if out, err := hostletJoin(ctx, bin, state, servingNode, server, token, caHashOf(t, cluster.CACertFile()), "--hostlet-arg", rotate); err != nil {
		t.Fatalf("hostlet join: %v\n%s", err, out)
	}
	h, err := cluster.StartJoinedHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: servingNode}, filepath.Join(state, "config.yaml"))
	if h != nil {
		t.Cleanup(func() {
			h.Stop()
			_ = client.CoreV1().Nodes().Delete(context.Background(), servingNode, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}

	ca := x509.NewCertPool()
	ca.AddCert(certOf(t, cluster.CACertFile()))
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(h.Port()))
	// issued is the served certificate once the cluster CA issued it for
	// the node's address.
	issued := func() *x509.Certificate {
		c := servedCert(addr)
		if c == nil {
			return nil
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return nil
		}
		return c
	}
	pollUntil(t, 3*time.Minute, "the kubelet API to serve a certificate of the cluster CA for 127.0.0.1", func() bool { return issued() != nil })
	first := issued()
	if first.Subject.CommonName != "system:node:"+servingNode {
		t.Fatalf("served certificate is for %v", first.Subject)
	}
	store := filepath.Join(h.RootDir(), "pki", "kubelet-server-current.pem")
	if certOf(t, store).SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("the served certificate is not %s's", store)
	}
	if c := approvedCSR(t, first); c == nil {
		t.Fatal("no CSR of the node issued the served certificate")
	} else if cond := csrCondition(c, certificatesv1.CertificateApproved); cond == nil || cond.Reason != "AutoApproved" {
		t.Fatalf("the node's CSR %s is not approved by the approver: %+v", c.Name, c.Status.Conditions)
	}

	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "served", "sh", "-c", "echo served-by-"+servingNode+"; exec sleep 3600")
	pod.Spec.NodeName = servingNode
	pod.Spec.TerminationGracePeriodSeconds = ptr[int64](1)
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	logsAndExec := func(t *testing.T) {
		t.Helper()
		if out, err := cluster.Kubectl(ctx, "logs", "-n", ns, pod.Name); err != nil || !strings.Contains(out, "served-by-"+servingNode) {
			t.Fatalf("kubectl logs through a verified kubelet certificate: %v\n%s", err, out)
		}
		if out, err := cluster.Kubectl(ctx, "exec", "-n", ns, pod.Name, "--", "echo", "exec-ok"); err != nil || strings.TrimSpace(out) != "exec-ok" {
			t.Fatalf("kubectl exec through a verified kubelet certificate: %v\n%s", err, out)
		}
	}
	logsAndExec(t)

	t.Run("renewal replaces the served certificate without a restart", func(t *testing.T) {
		// A certificate past its renewal time in the store; the approver
		// paused, so hostlet is seen serving it while its CSR waits.
		scaleApprover(t, release, 0)
		pollUntil(t, 2*time.Minute, "the approver to stop", func() bool {
			pods, err := client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=serving-approver,app.kubernetes.io/instance=" + release})
			return err == nil && len(pods.Items) == 0
		})
		certPEM, keyPEM, err := cluster.AgingNodeServingCert(servingNode, net.ParseIP("127.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		aging := restartWithPair(ctx, t, h, store, certPEM, keyPEM)
		pid := h.Pid()
		pollUntil(t, time.Minute, "hostlet to serve the aging certificate", func() bool {
			c := servedCert(addr)
			return c != nil && c.SerialNumber.Cmp(aging.SerialNumber) == 0
		})
		pollUntil(t, time.Minute, "the node's renewal CSR", func() bool { return pendingCSR(t) })

		scaleApprover(t, release, 1)
		pollUntil(t, 3*time.Minute, "a renewed certificate to be served", func() bool {
			c := issued()
			return c != nil && c.SerialNumber.Cmp(aging.SerialNumber) != 0 && c.SerialNumber.Cmp(first.SerialNumber) != 0
		})
		if h.Pid() != pid || h.Exited() {
			t.Fatal("hostlet restarted to serve the renewed certificate")
		}
		if renewed := issued(); certOf(t, store).SerialNumber.Cmp(renewed.SerialNumber) != 0 || !renewed.NotAfter.After(aging.NotAfter) {
			t.Fatalf("served %v until %v; the store holds %v", renewed.SerialNumber, renewed.NotAfter, certOf(t, store).SerialNumber)
		}
		logsAndExec(t)
	})

	t.Run("a name that is not the node's is denied", func(t *testing.T) {
		// The node itself asks for an address it does not have.
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, "kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		nodeClient, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		req, err := certutil.MakeCSR(key, &pkix.Name{CommonName: "system:node:" + servingNode, Organization: []string{"system:nodes"}},
			nil, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.9.9.9")})
		if err != nil {
			t.Fatal(err)
		}
		name, _, err := csr.RequestCertificateWithContext(ctx, nodeClient, req, "", certificatesv1.KubeletServingSignerName, nil,
			[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, key)
		if err != nil {
			t.Fatal(err)
		}
		var denied *certificatesv1.CertificateSigningRequestCondition
		pollUntil(t, 2*time.Minute, "the approver to decide on "+name, func() bool {
			c, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			if csrCondition(c, certificatesv1.CertificateApproved) != nil {
				t.Fatalf("CSR %s for 10.9.9.9 approved", name)
			}
			denied = csrCondition(c, certificatesv1.CertificateDenied)
			return denied != nil
		})
		if denied.Reason != "SANNotNodeAddress" || !strings.Contains(denied.Message, "10.9.9.9") {
			t.Fatalf("denied with %s: %s", denied.Reason, denied.Message)
		}
	})
}

// restartWithPair stops h, makes the pair the current one of the
// certificate store whose current file is current (<prefix>-current.pem,
// as certificate.FileStore keeps it), restarts h and returns the pair's
// certificate.
func restartWithPair(ctx context.Context, t *testing.T, h *harness.Hostlet, current string, certPEM, keyPEM []byte) *x509.Certificate {
	t.Helper()
	h.Stop()
	dir := filepath.Dir(current)
	s, err := certificate.NewFileStore(strings.TrimSuffix(filepath.Base(current), "-current.pem"), dir, dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	// Read before the restart, which may already renew it.
	placed := certOf(t, current)
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	return placed
}

// servedCert is the certificate the kubelet API at addr presents, nil if
// it presents none.
func servedCert(addr string) *x509.Certificate {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// approvedCSR is the node's kubelet-serving CSR that issued cert.
func approvedCSR(t *testing.T, cert *x509.Certificate) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	for _, c := range servingCSRs(t) {
		if len(c.Status.Certificate) > 0 {
			if issued, err := certutil.ParseCertsPEM(c.Status.Certificate); err == nil && issued[0].Equal(cert) {
				return &c
			}
		}
	}
	return nil
}

// pendingCSR says whether the node has a kubelet-serving CSR nobody decided on.
func pendingCSR(t *testing.T) bool {
	for _, c := range servingCSRs(t) {
		if len(c.Status.Conditions) == 0 {
			return true
		}
	}
	return false
}

func servingCSRs(t *testing.T) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := cluster.Client().CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+servingNode {
			out = append(out, c)
		}
	}
	return out
}

func csrCondition(c *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func scaleApprover(t *testing.T, release string, replicas int) {
	t.Helper()
	if out, err := cluster.Kubectl(ctxT(t), "scale", "-n", "kube-system", "deployment/"+release+"-hostlet-serving-approver", fmt.Sprintf("--replicas=%d", replicas)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

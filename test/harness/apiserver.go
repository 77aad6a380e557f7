package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// serviceAccountIssuer is also the audience the apiserver accepts.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// startAPIServer runs kube-apiserver on 127.0.0.1 with Node+RBAC
// authorization and NodeRestriction, so node identities are really checked.
func (c *Cluster) startAPIServer() (*process, error) {
	p := c.pki
	args := []string{
		"--bind-address", c.APIServerIP(),
		// A loopback advertise address is no valid endpoint (see the
		// reconciler below), but the default/kubernetes Service itself is
		// still created, which is what clients and the e2e framework need.
		// With NodeNetns it is the veth's root end, which pods reach through
		// kube-proxy's 10.96.0.1.
		"--advertise-address", c.APIServerIP(),
		"--secure-port", fmt.Sprint(c.ports.apiserver),
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient),
		"--tls-cert-file", p.APIServerCert,
		"--tls-private-key-file", p.APIServerKey,
		"--client-ca-file", p.CACert,
		"--service-account-issuer", serviceAccountIssuer,
		"--api-audiences", serviceAccountIssuer,
		"--service-account-key-file", p.SAPub,
		"--service-account-signing-key-file", p.SAKey,
		"--service-cluster-ip-range", serviceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--enable-bootstrap-token-auth",
		"--allow-privileged=true",
		"--kubelet-client-certificate", p.KubeletClientCert,
		"--kubelet-client-key", p.KubeletClientKey,
		// Node serving certificates minted by KubeletServingCert are signed
		// by the cluster CA, so the apiserver can verify them for logs/exec.
		"--kubelet-certificate-authority", p.CACert,
		// Node names do not resolve here; reach nodes by their InternalIP.
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--cert-dir", filepath.Join(c.dir, "pki", "apiserver-generated"),
		"--profiling=false",
	}
	// The aggregation layer, for extension API servers (metrics-server).
	// Aggregator routing dials the Service's endpoints (pod IPs, routed from
	// the root namespace to the node's) rather than its ClusterIP, which only
	// kube-proxy's rules inside a node's namespace know.
	args = append(args,
		"--requestheader-client-ca-file", p.CACert,
		"--requestheader-allowed-names", frontProxyClientCN,
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-username-headers", "X-Remote-User",
		"--proxy-client-cert-file", p.FrontProxyClientCert,
		"--proxy-client-key-file", p.FrontProxyClientKey,
		"--enable-aggregator-routing=true",
	)
	if c.net == nil {
		// Since 1.37 the API server refuses to start with a loopback
		// advertise address and an endpoint reconciler; before, the
		// reconciler only failed to write it. Without one the Service is
		// still there.
		args = append(args, "--endpoint-reconciler-type", "none")
	}
	if os.Getenv("HOSTLET_CONTROL_PLANE") == "" {
		// The ClusterTrustBundle and PodCertificateRequest APIs (beta in
		// 1.35, off by default), for projected clusterTrustBundle and
		// podCertificate sources; with them the Node authorizer and
		// NodeRestriction let nodes read bundles and request their pods'
		// certificates. Only on the control plane of this version:
		// another may not know the gates.
		args = append(args,
			"--feature-gates", "ClusterTrustBundle=true,ClusterTrustBundleProjection=true,PodCertificateRequest=true",
			"--runtime-config", "certificates.k8s.io/v1beta1/clustertrustbundles=true,certificates.k8s.io/v1beta1/podcertificaterequests=true")
	}
	args = append(args, c.opts.APIServerArgs...)
	return c.launch("kube-apiserver", filepath.Join(c.binDir, "kube-apiserver"), args...)
}

// waitAPIServer waits for /readyz through the admin client.
func (c *Cluster) waitAPIServer(ctx context.Context, p *process) error {
	rc := c.client.Discovery().RESTClient()
	return p.waitFor(ctx, "kube-apiserver /readyz", 100*time.Millisecond, func(ctx context.Context) error {
		body, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v: %s", err, body)
		}
		return nil
	})
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"k8s.io/apimachinery/pkg/util/wait"
)

// -full's nodes joined as a user joins them (-join, the default): the
// chart installed with helm (bootstrap token, cluster-info, RBAC, the
// cluster's DNS for join, and the serving-certificate approver, as the API
// server verifies kubelets' certificates), then on each node's machine (the
// cluster's node, Host "b") `hostlet join` with the token and CA pin NOTES
// print, with --rotate-server-certificates, and hostlet started from what
// join wrote, as its unit would. The harness mints no credential for them.

// fullRelease is the chart's release name.
const fullRelease = "hostlet"

// notesJoin is the join command the chart's NOTES print: server and token.
var notesJoin = regexp.MustCompile(`hostlet join (https://\S+) --token (\S+) --discovery-token-ca-cert-hash \$CA_HASH`)

// installFullChart installs charts/hostlet with its serving-certificate
// approver on the first node (from the test image, imported with imports),
// on that node's network (no kube-proxy yet for the kubernetes Service) and
// tolerating its NotReady taints (flannel comes after the nodes); the
// cluster's DNS set as CoreDNS will serve it (its Service comes later).
// Returns the server and token of the join command NOTES print.
func installFullChart(ctx context.Context, c config, cl *harness.Cluster, imports func(context.Context, string) error) (server, token string, err error) {
	helm, err := harness.BuildHelm(ctx, logf)
	if err != nil {
		return "", "", err
	}
	img, err := images.BuildApprover(ctx, filepath.Join(c.cache, "images"))
	if err != nil {
		return "", "", fmt.Errorf("approver image: %w", err)
	}
	if err := imports(ctx, img.Archive); err != nil {
		return "", "", err
	}
	dir := filepath.Join(cl.Dir(), "chart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	values, err := cl.ApproverValuesFile(dir, img.Ref, "  nodeSelector: {kubernetes.io/hostname: "+fullNodes[0]+"}\n  tolerations: [{operator: Exists}]\n")
	if err != nil {
		return "", "", err
	}
	notes, err := cl.Helm(ctx, helm, "install", fullRelease, filepath.Join(c.root, "charts", "hostlet"), "--namespace", "kube-system",
		"-f", values, "--set", "clusterDNS.servers={"+harness.ClusterDNS+"}", "--set", "clusterDNS.domain="+harness.ClusterDomain)
	if err != nil {
		return "", "", err
	}
	m := notesJoin.FindStringSubmatch(notes)
	if m == nil {
		return "", "", fmt.Errorf("the chart's NOTES print no join command:\n%s", notes)
	}
	return m[1], m[2], nil
}

// joinFullNode runs `hostlet join` for node name on host (nil: the
// cluster's node) with extra join flags, then hostlet from its files.
func joinFullNode(ctx context.Context, cl *harness.Cluster, host *harness.Host, bin, name, server, token, caHash string, extra []string) (*harness.Hostlet, error) {
	state := filepath.Join(cl.Dir(), "join", name)
	args := []string{"join", server, "--token", token, "--discovery-token-ca-cert-hash", caHash}
	if host != nil {
		args = append(args, host.JoinArgs(state, name)...)
	} else {
		args = append(args, cl.JoinArgs(state, name)...)
	}
	// Other nodes' kubelets run on this shared machine.
	args = append(args, "--ignore-preflight-errors", "KubeletNotRunning",
		"--hostlet-arg", "rotate-server-certificates=true", "--hostlet-arg", "v=4")
	args = append(args, extra...)
	t0 := time.Now()
	if out, err := cl.JoinCommand(ctx, host, bin, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("hostlet join %s: %w\n%s", name, err, out)
	}
	logf("%s joined in %v", name, time.Since(t0).Round(100*time.Millisecond))
	return cl.StartJoinedHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: name, NoWaitReady: true, Host: host},
		filepath.Join(state, "config.yaml"))
}

// waitServingCert waits until the kubelet API at addr serves a certificate
// of the cluster CA for ip (the approver approved the node's CSR and
// hostlet switched to it): until then the API server, which verifies
// kubelets, can reach no logs, exec or port-forward there. Polls: a TLS
// handshake is the only way to see what is served.
func waitServingCert(ctx context.Context, caFile, ip string, port int) error {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b) {
		return fmt.Errorf("%s: no certificate", caFile)
	}
	addr := net.JoinHostPort(ip, fmt.Sprint(port))
	var last error
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		d := tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: ip}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			last = err
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kubelet API %s serving a certificate of the cluster CA: %w (last: %v)", addr, err, last)
	}
	return nil
}

package hosttest

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/test/harness"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chart is the hostlet chart installed in the cluster: a release's
// package, as a user installs it.
type chart struct {
	helm, values string
	installed    release // the release whose chart is installed
	token        string  // the bootstrap token its notes print
}

// chartValues writes the values a user of the harness's cluster gives:
// cluster-info's server, and the serving-certificate approver (the
// harness's API server verifies kubelets' certificates, so logs and exec
// need a cluster-issued one) on the joined node's network. The image is
// the chart's own default: install and upgrade empty its tag again, so
// the packaged chart's appVersion names the image, the release's.
func chartValues(t *testing.T, cluster *harness.Cluster) string {
	values, err := cluster.ApproverValuesFile(t.TempDir(), imageRepo+":set-by-the-chart", "")
	if err != nil {
		t.Fatal(err)
	}
	return values
}

var joinRE = regexp.MustCompile(`hostlet join (https://\S+) --token (\S+) --discovery-token-ca-cert-hash \$CA_HASH`)

// install installs r's packaged chart and returns the join command's
// server, token and CA hash.
func (c *chart) install(ctx context.Context, t *testing.T, cluster *harness.Cluster, r release) (server, token, caHash string) {
	notes, err := cluster.Helm(ctx, c.helm, "install", "hostlet", r.chart, "--namespace", "kube-system",
		"-f", c.values, "--set-string", "servingCertApprover.image.tag=")
	if err != nil {
		t.Fatal(err)
	}
	m := joinRE.FindStringSubmatch(notes)
	if m == nil {
		t.Fatalf("NOTES print no join command:\n%s", notes)
	}
	c.installed, c.token = r, m[2]
	c.checkImage(ctx, t, cluster, r)
	pemBytes, err := os.ReadFile(cluster.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		t.Fatal("no PEM in the CA file")
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	return m[1], m[2], "sha256:" + hex.EncodeToString(sum[:])
}

// upgrade runs helm upgrade to r's packaged chart with the same values,
// as a user upgrades: the bootstrap token stays (the chart finds the one
// it made at install), and the approver rolls out with r's image, running
// on the joined node.
func (c *chart) upgrade(ctx context.Context, t *testing.T, cluster *harness.Cluster, r release) {
	from := c.installed
	notes, err := cluster.Helm(ctx, c.helm, "upgrade", "hostlet", r.chart, "--namespace", "kube-system",
		"-f", c.values, "--set-string", "servingCertApprover.image.tag=")
	if err != nil {
		t.Fatal(err)
	}
	c.installed = r
	if m := joinRE.FindStringSubmatch(notes); m == nil || m[2] != c.token {
		t.Errorf("helm upgrade %s -> %s: the notes' join token is not the install's %q:\n%s", from.version, r.version, c.token, notes)
	}
	name := c.checkImage(ctx, t, cluster, r)
	out, err := cluster.Kubectl(ctx, "rollout", "status", "-n", "kube-system", "deployment/"+name, "--timeout=5m")
	if err != nil {
		t.Fatalf("the approver's rollout after helm upgrade: %v\n%s", err, out)
	}
	pods, err := cluster.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=serving-approver"})
	if err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == "Running" {
			running = append(running, p.Name+" "+p.Spec.Containers[0].Image+" on "+p.Spec.NodeName)
		}
	}
	t.Logf("helm upgrade %s -> %s: approver %s", from.version, r.version, strings.Join(running, ", "))
	if len(running) != 1 || !strings.Contains(running[0], " "+imageRepo+":"+r.version+" ") {
		t.Errorf("after helm upgrade, the approver's running pods are %q, want one of %s:%s", running, imageRepo, r.version)
	}
}

// checkImage: the approver Deployment's image is r's, the chart's default.
// It returns the Deployment's name.
func (c *chart) checkImage(ctx context.Context, t *testing.T, cluster *harness.Cluster, r release) string {
	ds, err := cluster.Client().AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=serving-approver"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Items) != 1 {
		t.Fatalf("%d approver Deployments", len(ds.Items))
	}
	d := ds.Items[0]
	if got, want := d.Spec.Template.Spec.Containers[0].Image, imageRepo+":"+r.version; got != want {
		t.Errorf("the chart of release %s runs the approver from %s, want its release's image %s", r.version, got, want)
	}
	return d.Name
}

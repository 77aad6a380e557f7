// Package charts holds hostlet's Helm chart; its tests lint and render it
// with a real Helm built from its module (test/cluster/helm/build.sh).
package charts

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/test/harness"
)

func helmBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds Helm (minutes when cold)")
	}
	helm, err := harness.BuildHelm(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return helm
}

func helm(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

// Without a cluster, the chart needs the server and CA it would put into cluster-info.
var offline = []string{"--set", "clusterInfo.server=https://10.0.0.1:6443", "--set", "clusterInfo.caCert=not-checked-here"}

func TestChartLint(t *testing.T) {
	bin := helmBin(t)
	out, err := helm(t, bin, append([]string{"lint", "--strict", "hostlet"}, offline...)...)
	if err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
		t.Fatalf("helm lint is not clean:\n%s", out)
	}
}

func TestChartTemplate(t *testing.T) {
	bin := helmBin(t)
	render := func(args ...string) (string, error) {
		return helm(t, bin, append(append([]string{"template", "r", "hostlet"}, offline...), args...)...)
	}
	// notes are what an install prints (helm template renders no NOTES).
	notes := func(args ...string) (string, error) {
		return helm(t, bin, append(append([]string{"install", "r", "hostlet", "--dry-run=client"}, offline...), args...)...)
	}

	t.Run("generated token", func(t *testing.T) {
		out, err := render()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		id := regexp.MustCompile(`token-id: "([a-z0-9]{6})"`).FindStringSubmatch(out)
		if id == nil || !regexp.MustCompile(`token-secret: "[a-z0-9]{16}"`).MatchString(out) {
			t.Fatalf("no well-formed generated token:\n%s", out)
		}
		for _, want := range []string{
			"name: bootstrap-token-" + id[1], "namespace: kube-system", "type: bootstrap.kubernetes.io/token",
			`usage-bootstrap-authentication: "true"`, `usage-bootstrap-signing: "true"`,
			`auth-extra-groups: "system:bootstrappers:hostlet"`,
			"name: system:node-bootstrapper",
			"name: system:certificates.k8s.io:certificatesigningrequests:nodeclient",
			"name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
			"name: system:anonymous", "resourceNames: [cluster-info]",
			"name: cluster-info", "server: https://10.0.0.1:6443", "certificate-authority-data: bm90LWNoZWNrZWQtaGVyZQ==",
			"name: r-hostlet:kubelet-config", "resourceNames: [kubelet-config, hostlet-kubelet-config]",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("rendered chart lacks %q", want)
			}
		}
		if strings.Contains(out, "expiration:") {
			t.Error("a token without expiration renders one")
		}
		// helm template sees no cluster, so no kube-dns Service to take
		// the servers from.
		if strings.Contains(out, "name: hostlet-kubelet-config") {
			t.Error("a cluster DNS ConfigMap without servers")
		}
	})
	t.Run("cluster DNS", func(t *testing.T) {
		out, err := render("--set", "clusterDNS.servers={10.96.0.10,fd00::a}", "--set", "clusterDNS.domain=k8s.example")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := `  name: hostlet-kubelet-config
  namespace: kube-system
  labels:
    app.kubernetes.io/name: hostlet
    app.kubernetes.io/instance: r
    app.kubernetes.io/managed-by: Helm
    helm.sh/chart: hostlet-0.1.0
data:
  kubelet: |
    apiVersion: kubelet.config.k8s.io/v1beta1
    kind: KubeletConfiguration
    clusterDNS:
    - "10.96.0.10"
    - "fd00::a"
    clusterDomain: "k8s.example"
`
		if !strings.Contains(out, want) {
			t.Errorf("rendered chart lacks\n%s\n%s", want, out)
		}
		out, err = notes("--set", "clusterDNS.servers={10.96.0.10,fd00::a}", "--set", "clusterDNS.domain=k8s.example")
		if err != nil || !strings.Contains(out, "Joined nodes' pods use cluster DNS 10.96.0.10,fd00::a (domain k8s.example)") {
			t.Errorf("NOTES do not say which cluster DNS joined nodes get: %v\n%s", err, out)
		}
		out, err = notes()
		if err != nil || !strings.Contains(out, "No cluster DNS is published for joined nodes") {
			t.Errorf("NOTES do not say that no cluster DNS is published: %v\n%s", err, out)
		}
		out, err = render("--set", "clusterDNS.servers={10.96.0.10}", "--set", "clusterDNS.publish=false", "--set", "rbac.kubeletConfig=false")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, not := range []string{"hostlet-kubelet-config", "r-hostlet:kubelet-config"} {
			if strings.Contains(out, not) {
				t.Errorf("publish=false, rbac.kubeletConfig=false render %q", not)
			}
		}
	})
	t.Run("given token and expiry", func(t *testing.T) {
		out, err := render("--set", "bootstrapToken.token=abcdef.0123456789abcdef",
			"--set", "bootstrapToken.expiration=2030-01-01T00:00:00Z", "--set", "bootstrapToken.group=system:bootstrappers:burst")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"name: bootstrap-token-abcdef", `token-secret: "0123456789abcdef"`,
			`expiration: "2030-01-01T00:00:00Z"`, `auth-extra-groups: "system:bootstrappers:burst"`} {
			if !strings.Contains(out, want) {
				t.Errorf("rendered chart lacks %q", want)
			}
		}
	})
	t.Run("serving approver", func(t *testing.T) {
		out, err := render()
		if err != nil || strings.Contains(out, "approve-serving") {
			t.Fatalf("the approver is on by default: %v\n%s", err, out)
		}
		out, err = render("--set", "servingCertApprover.enabled=true", "--set", "servingCertApprover.image.tag=t1",
			"--set", "servingCertApprover.hostNetwork=true", "--set", "servingCertApprover.env[0].name=KUBERNETES_SERVICE_HOST",
			"--set", "servingCertApprover.env[0].value=10.0.0.1")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{
			"kind: Deployment", "name: r-hostlet-serving-approver", "serviceAccountName: r-hostlet-serving-approver",
			`image: "ghcr.io/hostlet/hostlet:t1"`, "args: [approve-serving]", "hostNetwork: true",
			"name: KUBERNETES_SERVICE_HOST", "resources: [certificatesigningrequests/approval]",
			"resourceNames: [kubernetes.io/kubelet-serving]", "verbs: [approve]", "resources: [nodes]",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("rendered chart lacks %q", want)
			}
		}
	})
	t.Run("registry mirror peers", func(t *testing.T) {
		out, err := render()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if strings.Contains(out, "registry-mirror-peers") {
			t.Errorf("nodes may list Nodes by default")
		}
		if out, err = render("--set", "rbac.registryMirror=true"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"name: r-hostlet:registry-mirror-peers", "verbs: [list, watch]", "name: system:nodes"} {
			if !strings.Contains(out, want) {
				t.Errorf("rendered chart lacks %q", want)
			}
		}
	})
	t.Run("volume expansion", func(t *testing.T) {
		out, err := render()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if strings.Contains(out, "volume-expansion") {
			t.Errorf("nodes may list claims by default")
		}
		if out, err = render("--set", "rbac.volumeExpansion=true"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"name: r-hostlet:volume-expansion", "resources: [persistentvolumeclaims]", "verbs: [list, watch]", "name: system:nodes"} {
			if !strings.Contains(out, want) {
				t.Errorf("rendered chart lacks %q", want)
			}
		}
	})
	t.Run("no optional RBAC, no cluster-info", func(t *testing.T) {
		out, err := render("--set", "rbac.getNodes=false", "--set", "rbac.nodeSelfDelete=false", "--set", "clusterInfo.create=false")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, not := range []string{"get-nodes", "node-self-delete", "name: cluster-info\n"} {
			if strings.Contains(out, not) {
				t.Errorf("rendered chart has %q", not)
			}
		}
	})
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"malformed token": {[]string{"--set", "bootstrapToken.token=ABC.def"}, "bootstrapToken.token must look like"},
		"foreign group":   {[]string{"--set", "bootstrapToken.group=admins"}, "must start with system:bootstrappers:"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := render(c.args...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("want a failure saying %q, got %v:\n%s", c.want, err, out)
			}
		})
	}
	t.Run("cluster-info needs a server", func(t *testing.T) {
		out, err := helm(t, bin, "template", "r", "hostlet")
		if err == nil || !strings.Contains(out, "clusterInfo.server") {
			t.Fatalf("want a failure naming clusterInfo.server, got %v:\n%s", err, out)
		}
	})
}

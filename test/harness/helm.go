package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildHelm builds Helm from its pinned module (test/cluster/helm, cached
// like the other components; a no-op once built) and returns its path.
func BuildHelm(ctx context.Context, logf func(string, ...any)) (string, error) {
	bin, err := runBuildScript(ctx, logf, "test/cluster/helm/build.sh")
	if err != nil {
		return "", err
	}
	helm := filepath.Join(bin, "helm")
	if _, err := os.Stat(helm); err != nil {
		return "", err
	}
	return helm, nil
}

// Helm runs the helm binary against this cluster as its admin, with Helm's
// own state under the cluster's dir, and returns its stdout.
func (c *Cluster) Helm(ctx context.Context, helm string, args ...string) (string, error) {
	home := filepath.Join(c.dir, "helm")
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.adminKubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %v: %w\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// ApproverValuesFile writes the chart's values for this cluster to a file
// in dir and returns its path: cluster-info's server, and the
// serving-certificate approver from the local image ref (repository:tag)
// on the host's network, reaching the API server at its own address (the
// harness runs no kube-proxy for the kubernetes Service). extra are more
// lines under servingCertApprover, indented by two spaces.
func (c *Cluster) ApproverValuesFile(dir, ref, extra string) (string, error) {
	api, err := url.Parse(c.APIServerURL())
	if err != nil {
		return "", err
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 {
		return "", fmt.Errorf("image %q has no tag", ref)
	}
	values := fmt.Sprintf(`clusterInfo:
  server: %s
servingCertApprover:
  enabled: true
  image: {repository: %s, tag: %s, pullPolicy: Never}
  hostNetwork: true
  env:
  - {name: KUBERNETES_SERVICE_HOST, value: %q}
  - {name: KUBERNETES_SERVICE_PORT, value: %q}
%s`, c.APIServerURL(), ref[:i], ref[i+1:], api.Hostname(), api.Port(), extra)
	path := filepath.Join(dir, "values.yaml")
	return path, os.WriteFile(path, []byte(values), 0o644)
}

package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

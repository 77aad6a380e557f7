package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildCrictl builds crictl (sigs.k8s.io/cri-tools, pinned in
// test/cluster/crictl/build.sh) into the component cache, like Helm (a
// no-op once built), and returns its path.
func BuildCrictl(ctx context.Context, logf func(string, ...any)) (string, error) {
	bin, err := runBuildScript(ctx, logf, "test/cluster/crictl/build.sh")
	if err != nil {
		return "", err
	}
	crictl := filepath.Join(bin, "crictl")
	if _, err := os.Stat(crictl); err != nil {
		return "", err
	}
	return crictl, nil
}

// Crictl runs crictl against the node's CRI socket, with no config file
// (crictl would read /etc/crictl.yaml otherwise), and returns its stdout.
func (h *Hostlet) Crictl(ctx context.Context, crictl string, args ...string) (string, error) {
	cmd := h.CrictlCommand(ctx, crictl, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("crictl %v: %w\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// CrictlCommand is the command Crictl runs, for a caller that streams its
// input or output (exec -i, attach, port-forward, events).
func (h *Hostlet) CrictlCommand(ctx context.Context, crictl string, args ...string) *exec.Cmd {
	endpoint := "unix://" + h.CRISocket()
	return exec.CommandContext(ctx, crictl, append([]string{"--config", os.DevNull,
		"--runtime-endpoint", endpoint, "--image-endpoint", endpoint, "--timeout", "20s"}, args...)...)
}

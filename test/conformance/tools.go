package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hostlet/hostlet/test/harness"
)

// tooling is the output of test/cluster/e2e/build.sh.
type tooling struct {
	dir, e2eTest, ginkgo string
}

func repoRoot() (string, error) { return harness.RepoRoot() }

// buildTools runs test/cluster/e2e/build.sh (a no-op once cached); its
// progress goes to stderr, the tools dir is its last stdout line.
func buildTools(ctx context.Context, root string) (tooling, error) {
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "cluster", "e2e", "build.sh"))
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return tooling{}, fmt.Errorf("test/cluster/e2e/build.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	t := tooling{dir: dir, e2eTest: filepath.Join(dir, "e2e.test"), ginkgo: filepath.Join(dir, "ginkgo")}
	for _, p := range []string{t.e2eTest, t.ginkgo} {
		if _, err := os.Stat(p); err != nil {
			return tooling{}, fmt.Errorf("build.sh printed %q: %w", dir, err)
		}
	}
	return t, nil
}

func (t tooling) listTests(ctx context.Context) ([]listedTest, error) {
	out, err := exec.CommandContext(ctx, t.e2eTest, "--list-tests").Output()
	if err != nil {
		return nil, fmt.Errorf("e2e.test --list-tests: %w", err)
	}
	return parseTestList(bytes.NewReader(out))
}

func (t tooling) listImages(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, t.e2eTest, "--list-images").Output()
	if err != nil {
		return nil, fmt.Errorf("e2e.test --list-images: %w", err)
	}
	return strings.Fields(string(out)), nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
)

// prepareImages builds the archives of every upstream image the suite
// lists that has a local stand-in.
func prepareImages(ctx context.Context, c config, tools tooling) ([]builtImage, error) {
	t0 := time.Now()
	list, err := tools.listImages(ctx)
	if err != nil {
		return nil, err
	}
	wanted := wantedImages(list)
	scratch, err := os.MkdirTemp("", "hostlet-conformance-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	in, err := readImageInputs(ctx, c.root, tools.dir, scratch)
	if err != nil {
		return nil, err
	}
	imgs, err := buildImages(wanted, in, filepath.Join(c.cache, "conformance", "images"))
	if err != nil {
		return nil, err
	}
	logf("%d test images (%d refs) ready in %v", len(imgs), len(wanted), time.Since(t0).Round(time.Second))
	return imgs, nil
}

// testEnv is the running cluster with its hostlet node.
type testEnv struct {
	cluster *harness.Cluster
	node    *harness.Hostlet
}

func startCluster(ctx context.Context, c config, imgs []builtImage) (*testEnv, error) {
	bin := c.hostlet
	if bin == "" {
		var err error
		if bin, err = harness.BuildHostlet(ctx); err != nil {
			return nil, err
		}
	}
	cl, err := harness.Start(ctx, harness.Options{Logf: logf, KeepDir: c.keep})
	if err != nil {
		return nil, err
	}
	env := &testEnv{cluster: cl}
	for _, img := range imgs {
		if err := cl.ImportImage(ctx, img.archive); err != nil {
			cl.Stop()
			return nil, err
		}
	}
	logf("imported %d images into containerd namespace %s", len(imgs), harness.ContainerdNamespace)
	if env.node, err = cl.StartHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: c.nodeName}); err != nil {
		cl.Stop()
		return nil, fmt.Errorf("hostlet: %w (log: %s)", err, env.logTail())
	}
	logf("cluster up: node %s ready, kubeconfig %s", c.nodeName, cl.KubeconfigPath())
	return env, nil
}

// stop copies the components' logs (hostlet's above all) into the run's
// results, then stops the cluster.
func (e *testEnv) stop(runDir string) {
	dst := filepath.Join(runDir, "logs")
	if err := os.MkdirAll(dst, 0o755); err == nil {
		logs, _ := filepath.Glob(filepath.Join(e.cluster.LogDir(), "*.log"))
		for _, l := range logs {
			if err := copyFile(l, filepath.Join(dst, filepath.Base(l))); err != nil {
				logf("copy %s: %v", l, err)
			}
		}
	}
	e.cluster.Stop()
}

func (e *testEnv) logTail() string {
	if e.node == nil {
		return e.cluster.LogDir()
	}
	return e.node.LogPath()
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// runGinkgo runs the selected tests; the output goes to the terminal and
// to <runDir>/e2e.log, the JUnit report to <runDir>/junit_01.xml. Its error
// only says ginkgo exited non-zero: the report tells what failed.
func runGinkgo(ctx context.Context, c config, tools tooling, env *testEnv, names []string, runDir string) error {
	log, err := os.Create(filepath.Join(runDir, "e2e.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	kubeconfig := env.cluster.KubeconfigPath()
	args := []string{
		"--procs=" + fmt.Sprint(c.procs),
		"--no-color",
		"--silence-skips",
		"--timeout=" + c.timeout.String(),
		"--focus=" + focusRegexp(names),
		tools.e2eTest, "--",
		"--kubeconfig=" + kubeconfig,
		"--provider=local",
		"--node-os-distro=debian",
		"--kubectl-path=" + filepath.Join(env.cluster.BinDir(), "kubectl"),
		"--report-dir=" + runDir,
		"--disable-log-dump",
	}
	args = append(args, strings.Fields(c.extraFlags)...)
	cmd := exec.CommandContext(ctx, tools.ginkgo, args...)
	cmd.Dir = runDir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout = io.MultiWriter(os.Stdout, log)
	cmd.Stderr = cmd.Stdout
	// On ^C let ginkgo interrupt the specs and run their cleanup.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	fmt.Fprintf(log, "# %s %s\n", tools.ginkgo, strings.Join(args[:3], " "))
	return cmd.Run()
}

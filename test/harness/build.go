package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hostlet/hostlet/test/images"
)

const modulePath = "github.com/hostlet/hostlet"

// RepoRoot finds the hostlet checkout by walking up from the working
// directory (go test runs in the package dir) to the go.mod declaring
// module github.com/hostlet/hostlet.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRepoRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod with module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) == 2 && fs[0] == "module" {
			return fs[1] == modulePath
		}
	}
	return false
}

// buildMu serialises build.sh within the process: parallel Starts would
// otherwise build the same component twice.
var buildMu sync.Mutex

// BuildComponents runs test/cluster/build.sh (a no-op once its cache is
// warm) and returns the bin dir it prints on its last stdout line. With
// $HOSTLET_CONTROL_PLANE set to another minor version ("1.37") it returns
// ControlPlaneBinDir's dir instead.
func BuildComponents(ctx context.Context, logf func(string, ...any)) (string, error) {
	bin, err := runBuildScript(ctx, logf, "test/cluster/build.sh")
	if err != nil {
		return "", err
	}
	if v := os.Getenv("HOSTLET_CONTROL_PLANE"); v != "" {
		return ControlPlaneBinDir(ctx, logf, bin, v)
	}
	return bin, nil
}

// ControlPlaneBinDir builds the control plane of another minor version
// (test/cluster/kube1NN/build.sh, e.g. "1.37" -> kube137) and returns its dir:
// kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of that
// version, with links to the rest (etcd, containerd, runc) in bin, so a
// cluster started on it is the usual one with only the control plane, and the
// kubectl the tests drive, swapped.
func ControlPlaneBinDir(ctx context.Context, logf func(string, ...any), bin, version string) (string, error) {
	minor, ok := strings.CutPrefix(version, "1.")
	if !ok || minor == "" || strings.ContainsAny(minor, "./") {
		return "", fmt.Errorf("control plane version %q: want 1.NN", version)
	}
	dir, err := runBuildScript(ctx, logf, filepath.Join("test/cluster", "kube1"+minor, "build.sh"))
	if err != nil {
		return "", err
	}
	for _, b := range []string{"etcd", "containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		link, target := filepath.Join(dir, b), filepath.Join(bin, b)
		if t, err := os.Readlink(link); err == nil && t == target {
			continue // left as is: another cluster may be starting from it
		}
		if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
			return "", err
		}
		if err := os.Symlink(target, link); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// runBuildScript runs one of test/cluster's build scripts (with args, e.g.
// the components to build) from the repo root, one at a time, and returns
// the bin dir it prints last.
func runBuildScript(ctx context.Context, logf func(string, ...any), script string, args ...string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, script)}, args...)...)
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" && logf != nil {
		logf("%s: %s", filepath.Base(script), s)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := strings.TrimSpace(lines[len(lines)-1])
	if st, err := os.Stat(bin); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s printed %q, not a directory", script, bin)
	}
	return bin, nil
}

// BuildHostlet builds ./cmd/hostlet (with images.HostletTags) into <cache>/hostlet-dev-<checkout> and returns
// its path. The cache is $HOSTLET_CACHE or ~/.cache/hostlet, like build.sh.
func BuildHostlet(ctx context.Context) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cache := os.Getenv("HOSTLET_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "hostlet")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// One binary per checkout, so work trees tested side by side never run
	// each other's build.
	out := filepath.Join(cache, fmt.Sprintf("hostlet-dev-%x", sha256.Sum256([]byte(root)))[:len("hostlet-dev-")+12])
	cmd := exec.CommandContext(ctx, "go", "build", "-tags="+images.HostletTags, "-o", out, "./cmd/hostlet")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/hostlet: %w\n%s", err, b)
	}
	return out, nil
}

// BuildComponent builds an on-request component of test/cluster/build.sh
// ("kube-proxy", "coredns": only the tests that run it pay for its build)
// and returns the path of its binary, named like the component. Under
// $HOSTLET_CONTROL_PLANE, kube-proxy is that version's. A component with a
// build script of its own, test/cluster/<name>/build.sh (whose pin then
// never changes the key of build.sh's components), is built by that.
func BuildComponent(ctx context.Context, logf func(string, ...any), name string) (string, error) {
	script := "test/cluster/build.sh"
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	own := filepath.Join("test/cluster", name, "build.sh")
	if _, err := os.Stat(filepath.Join(root, own)); err == nil && !strings.ContainsAny(name, "/.") {
		script = own
	}
	// A cluster of another version runs that version's kube-proxy, as its
	// users' clusters do (kube-proxy is the control plane's DaemonSet).
	if v := os.Getenv("HOSTLET_CONTROL_PLANE"); v != "" && name == "kube-proxy" {
		minor, ok := strings.CutPrefix(v, "1.")
		if !ok || minor == "" || strings.ContainsAny(minor, "./") {
			return "", fmt.Errorf("control plane version %q: want 1.NN", v)
		}
		script = filepath.Join("test/cluster", "kube1"+minor, "build.sh")
	}
	bin, err := runBuildScript(ctx, logf, script, name)
	if err != nil {
		return "", err
	}
	p := filepath.Join(bin, name)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// checkedBinDirs remembers bin dirs that passed checkBinaries.
var checkedBinDirs sync.Map

// checkBinaries makes sure every component is present, and that the kube
// binaries carry a version: built without build.sh's -X version flags they
// panic at startup ("version string \"\" doesn't match"), which is better
// reported once, here, with the remedy.
func checkBinaries(binDir string) error {
	if _, ok := checkedBinDirs.Load(binDir); ok {
		return nil
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
		"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("bin dir %s: %w", binDir, err)
		}
	}
	out, err := exec.Command(filepath.Join(binDir, "kube-apiserver"), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "Kubernetes v") {
		return fmt.Errorf("%s/kube-apiserver --version failed (%v): the kube binaries were built without their version "+
			"(test/cluster/build.sh must pass -X k8s.io/component-base/version.gitVersion=v1.x.y; after fixing it delete "+
			"%s/.kube-* so it rebuilds); output: %.300s", binDir, err, binDir, out)
	}
	checkedBinDirs.Store(binDir, true)
	return nil
}

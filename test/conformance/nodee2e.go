package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hostlet/hostlet/test/harness"
)

// -node-e2e runs the kubelet's own suite, test/e2e_node of the pinned
// release (e2e_node.test), against an existing node as upstream's
// "node conformance" image does: --start-services=false, so the suite
// starts nothing and reads the node's configuration through /configz
// (static pod path, read-only port, address), writes static pods into the
// staticPodPath it finds there, fetches /stats/summary from the read-only
// port, and lists and stops containers through the node's CRI endpoint
// (hostlet's --cri-socket, containerd's CRI for the kubelet). The suite
// runs on the node: in its network namespace (127.0.0.1 is the node's),
// so both kinds' nodes live in one (harness.Options.NodeNetns).
//
// The [NodeConformance] specs run, those not [Serial], [Slow] or
// [Disruptive] in parallel, then the [Serial] and [Slow] ones one at a time;
// [Disruptive] ones restart the node's agent through systemd, which this
// machine has not (make hosttest's VMs have). node-known-failures.txt
// names hostlet's known failures, with why.

// The node's fixed ports, as the suite assumes them: its restart specs
// probe http://127.0.0.1:10248/healthz (ports.KubeletHealthzPort) whatever
// /configz says, and its metrics specs the read-only port 10255.
const (
	nodeE2EHealthzPort  = 10248
	nodeE2EReadOnlyPort = 10255
)

// nodeE2EAddress is where the node serves its API and read-only port: every
// address of its network namespace, as the kubelet's default; the suite's
// metrics specs read localhost:10255.
const nodeE2EAddress = "0.0.0.0"

// nodeTooling is test/cluster/e2e/build.sh node's output.
type nodeTooling struct {
	dir, test, ginkgo string
}

func buildNodeTools(ctx context.Context, root string) (nodeTooling, error) {
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "cluster", "e2e", "build.sh"), "node")
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return nodeTooling{}, fmt.Errorf("test/cluster/e2e/build.sh node: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	t := nodeTooling{dir: dir, test: filepath.Join(dir, "e2e_node.test"), ginkgo: filepath.Join(dir, "ginkgo")}
	for _, p := range []string{t.test, t.ginkgo} {
		if _, err := os.Stat(p); err != nil {
			return nodeTooling{}, fmt.Errorf("build.sh node printed %q: %w", dir, err)
		}
	}
	return t, nil
}

// listSpecs is every spec of the suite, by the name the framework's JUnit
// report gives it (no labels appended, unlike ginkgo's own): e2e_node.test
// has no --list-tests, so a dry run's report.
func (t nodeTooling) listSpecs(ctx context.Context) ([]string, error) {
	dir, err := os.MkdirTemp("", "hostlet-node-e2e-list-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "junit_01.xml")
	cmd := exec.CommandContext(ctx, t.test, "--ginkgo.dry-run", "--ginkgo.no-color", "--start-services=false",
		"--report-dir="+dir)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("e2e_node.test --ginkgo.dry-run: %w\n%s", err, tail(out, 2000))
	}
	results, err := readJUnit(report)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range results {
		if strings.HasPrefix(r.name, "[sig-") {
			names = append(names, r.name)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("e2e_node.test's dry run listed no specs")
	}
	return names, nil
}

func (t nodeTooling) listImages(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, t.test, "--list-images").Output()
	if err != nil {
		return nil, fmt.Errorf("e2e_node.test --list-images: %w", err)
	}
	return strings.Fields(string(out)), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

var (
	nodeConformanceRE = regexp.MustCompile(`\[NodeConformance\]`)
	// Restarting the node's agent or runtime: systemd units the suite
	// finds by name (see nodeE2E's comment).
	disruptiveRE = regexp.MustCompile(`\[Disruptive\]`)
	serialRE     = regexp.MustCompile(`\[Serial\]|\[Slow\]`)
)

// nodeConformanceNames splits the suite's [NodeConformance] specs (with
// every, all its specs) into those run in parallel and those run one at a
// time.
func nodeConformanceNames(all []string, every bool) (parallel, serial []string) {
	for _, n := range all {
		switch {
		case !every && !nodeConformanceRE.MatchString(n), disruptiveRE.MatchString(n):
		case serialRE.MatchString(n):
			serial = append(serial, n)
		default:
			parallel = append(parallel, n)
		}
	}
	return parallel, serial
}

// runNodeE2E is -node-e2e's run: the suite on each node kind in turn.
func runNodeE2E(ctx context.Context, c config, tools tooling) (int, error) {
	t0 := time.Now()
	nt, err := buildNodeTools(ctx, c.root)
	if err != nil {
		return 1, err
	}
	logf("node e2e tooling in %s (%v)", nt.dir, time.Since(t0).Round(time.Second))
	all, err := nt.listSpecs(ctx)
	if err != nil {
		return 1, err
	}
	if c.nodeAll && c.focus == "" {
		return 2, errors.New("-node-all needs -focus: the suite's specs outside [NodeConformance] are a thousand, most of them for features this node has not")
	}
	parallel, serial := nodeConformanceNames(all, c.nodeAll)
	// -focus and -skip select from both parts at once: either may be left
	// empty.
	names, err := filterNames(append(append([]string(nil), parallel...), serial...), c.focus)
	if err != nil {
		return 2, err
	}
	if names, err = skipNames(names, c.skip); err != nil {
		return 2, err
	}
	selected := map[string]bool{}
	for _, n := range names {
		selected[n] = true
	}
	keep := func(l []string) []string {
		return slices.DeleteFunc(l, func(n string) bool { return !selected[n] })
	}
	parallel, serial = keep(parallel), keep(serial)
	known, err := readKnownFailures(filepath.Join(c.listsDir, "node-known-failures.txt"))
	if err != nil {
		return 1, err
	}
	if problems := checkNodeKnown(all, known); len(problems) > 0 {
		return 1, fmt.Errorf("node-known-failures.txt does not match the suite:\n  %s", strings.Join(problems, "\n  "))
	}
	if c.skipKnown {
		parallel, serial = withoutKnown(parallel, known), withoutKnown(serial, known)
		names = append(append([]string(nil), parallel...), serial...)
	}
	if c.list {
		for _, n := range names {
			fmt.Println(n)
		}
		return 0, nil
	}
	runDir, images, err := startRun(ctx, c, tools, nt.listImages)
	if err != nil {
		return 1, err
	}
	var out strings.Builder
	byKind := map[nodeKind]summary{}
	code := 0
	for _, kind := range c.nodeKinds {
		t1 := time.Now()
		results, err := runNodeKind(ctx, c, nt, images, kind, parallel, serial, runDir)
		if ctx.Err() != nil {
			return 130, errors.New("interrupted")
		}
		if err != nil {
			return 1, err
		}
		k := known
		if kind != kindHostlet {
			k = nil
		}
		s := summarize(results, names, k)
		byKind[kind] = s
		fmt.Fprintf(&out, "\n==== %s ====", kind)
		s.print(&out, k)
		s.printBySIG(&out)
		fmt.Fprintf(&out, "\n%d node e2e specs (%d parallel with %d processes, %d serial) on %s in %v; results: %s\n",
			len(names), len(parallel), c.procs, len(serial), kind, time.Since(t1).Round(time.Second), runDir)
		if kind == kindHostlet && !s.ok() {
			code = 1
		}
	}
	if len(c.nodeKinds) > 1 {
		printSIGComparison(&out, byKind[kindHostlet], byKind[kindKubelet])
		printComparison(&out, names, byKind[kindHostlet], byKind[kindKubelet])
	}
	return verdict(out.String(), runDir, byKind, code, "node e2e specs outside node-known-failures.txt", "node e2e failure")
}

// checkNodeKnown: every name in node-known-failures.txt is a spec of the
// suite, so a renamed spec does not hide a failure.
func checkNodeKnown(all []string, known knownFailures) []string {
	in := map[string]bool{}
	for _, n := range all {
		in[n] = true
	}
	var problems []string
	for n := range known {
		if !in[n] {
			problems = append(problems, fmt.Sprintf("%q is not a spec of e2e_node.test", n))
		}
	}
	return problems
}

// runNodeKind starts a cluster with one node of kind and runs the parallel
// specs, then the serial ones, on it. Each part's report and output go to
// <runDir>/<kind>-node/<part>, the components' logs to <runDir>/<kind>-node/logs.
func runNodeKind(ctx context.Context, c config, nt nodeTooling, images []builtImage, kind nodeKind, parallel, serial []string, runDir string) ([]result, error) {
	c.nodeE2E = true
	env, err := startCluster(ctx, c, images, kind, false)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(runDir, string(kind)+"-node")
	defer env.stop(base)
	var all []result
	for _, part := range []struct {
		name  string
		specs []string
		procs int
	}{{"parallel", parallel, c.procs}, {"serial", serial, 1}} {
		if len(part.specs) == 0 {
			continue
		}
		dir := filepath.Join(base, part.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		logf("running %d %s node e2e specs on %s with %d ginkgo processes", len(part.specs), part.name, kind, part.procs)
		runErr := runNodeGinkgo(ctx, c, nt, env, kind, part.specs, part.procs, dir)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		results, err := readJUnit(filepath.Join(dir, "junit_01.xml"))
		if err != nil {
			return nil, fmt.Errorf("%w (ginkgo: %v); see %s", err, runErr, filepath.Join(dir, "e2e.log"))
		}
		all = append(all, results...)
	}
	return all, nil
}

// kubeletDir is where the suite expects the node's root dir whatever its
// configuration says: its device plugin specs serve their plugins in
// /var/lib/kubelet/device-plugins, its pod resources specs dial
// /var/lib/kubelet/pod-resources.
const kubeletDir = "/var/lib/kubelet"

// linkKubeletDir gives the suite the node's dirs at /var/lib/kubelet for
// the run, never touching what a real kubelet keeps there: with no such
// dir, hostlet's root dir linked there (the link removed after), or for
// the kubelet, which makes /var/lib/kubelet/device-plugins itself
// whatever its root dir, the dir it makes removed after; with one (a
// kubelet ran here), hostlet's device-plugins and pod-resources bound over
// its own for the run.
func (e *testEnv) linkKubeletDir(kind nodeKind) error {
	if _, err := os.Lstat(kubeletDir); os.IsNotExist(err) {
		if kind == kindKubelet {
			e.hostDirs = append(e.hostDirs, kubeletDir)
			return nil
		}
		if err := os.Symlink(e.rootDir(), kubeletDir); err != nil {
			return err
		}
		e.hostDirs = append(e.hostDirs, kubeletDir)
		return nil
	} else if err != nil || kind == kindKubelet {
		return err
	}
	for _, sub := range []string{"device-plugins", "pod-resources"} {
		src, dst := filepath.Join(e.rootDir(), sub), filepath.Join(kubeletDir, sub)
		if err := os.MkdirAll(src, 0o750); err != nil {
			return err
		}
		if _, err := os.Lstat(dst); os.IsNotExist(err) {
			if err := os.Mkdir(dst, 0o750); err != nil {
				return err
			}
			e.hostDirs = append(e.hostDirs, dst)
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto %s: %w", src, dst, err)
		}
		e.binds = append(e.binds, dst)
	}
	logf("%s exists: the node's device-plugins and pod-resources bound over its own for the run", kubeletDir)
	return nil
}

// nodeE2EStaticPodDir is the node's staticPodPath in the cluster's dir.
func nodeE2EStaticPodDir(cl *harness.Cluster, kind nodeKind) string {
	return filepath.Join(cl.Dir(), "static-pods-"+string(kind))
}

// nodeE2EHostletArgs are the flags a hostlet node gets for the suite: the
// kubelet's fixed ports and a static pod directory.
func nodeE2EHostletArgs(cl *harness.Cluster) ([]string, error) {
	dir := nodeE2EStaticPodDir(cl, kindHostlet)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return []string{
		"--address", nodeE2EAddress,
		"--read-only-port", fmt.Sprint(nodeE2EReadOnlyPort),
		"--healthz-port", fmt.Sprint(nodeE2EHealthzPort), "--healthz-bind-address", "127.0.0.1",
		"--pod-manifest-path", dir,
		// As the kubelet the harness starts (and its default): none.
		"--cluster-domain=",
		// The kubelet's container log links are always there (its
		// containerLogsDir); the suite's log path spec reads them.
		"--container-logs-dir", "/var/log/containers",
	}, nil
}

// nodeE2EKubeletOptions sets the same on the kubelet's options.
func nodeE2EKubeletOptions(cl *harness.Cluster, opts *harness.KubeletOptions) {
	opts.ReadOnlyPort, opts.HealthzPort, opts.Address = nodeE2EReadOnlyPort, nodeE2EHealthzPort, nodeE2EAddress
	opts.StaticPodPath = nodeE2EStaticPodDir(cl, kindKubelet)
}

// runNodeGinkgo runs e2e_node.test's specs with ginkgo inside the node's
// network namespace; output to the terminal and <dir>/e2e.log, the JUnit
// report to <dir>/junit_01.xml.
func runNodeGinkgo(ctx context.Context, c config, nt nodeTooling, env *testEnv, kind nodeKind, specs []string, procs int, dir string) error {
	log, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cri := ""
	if kind == kindKubelet {
		cri = env.kubelet.CRISocket()
	} else {
		cri = env.node.CRISocket()
	}
	token, err := nodeE2EToken(ctx, env.cluster)
	if err != nil {
		return err
	}
	args := []string{
		"--net=" + env.cluster.NodeNetnsPath(), "--", nt.ginkgo,
		"--procs=" + fmt.Sprint(procs),
		"--no-color",
		"--silence-skips",
		"--timeout=" + c.timeout.String(),
		"--focus=" + focusRegexp(specs),
		nt.test, "--",
		// The suite's client is --host and --bearer-token, TLS unverified
		// (framework.LoadConfig's node e2e branch): no kubeconfig.
		"--host=" + env.cluster.APIServerURL(),
		"--bearer-token=" + token,
		"--start-services=false",
		"--prepull-images=false",
		"--node-name=" + nodeName(c, kind),
		"--container-runtime-endpoint=unix://" + cri,
		"--image-service-endpoint=unix://" + cri,
		"--kubectl-path=" + filepath.Join(env.cluster.BinDir(), "kubectl"),
		"--report-dir=" + dir,
		"--disable-log-dump",
	}
	args = append(args, strings.Fields(c.extraFlags)...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	cmd.Stdout = io.MultiWriter(os.Stdout, log)
	cmd.Stderr = cmd.Stdout
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	fmt.Fprintf(log, "# %s %s\n", nt.ginkgo, strings.Join(args[3:6], " "))
	return cmd.Run()
}

// nodeE2EToken is a bearer token of cluster-admin's rights for the suite:
// a ServiceAccount's, bound to cluster-admin, good for a day.
func nodeE2EToken(ctx context.Context, cl *harness.Cluster) (string, error) {
	const ns, name = "kube-system", "node-e2e"
	c := cl.Client()
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	day := int64(24 * 3600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &day},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for the suite: %w", err)
	}
	return tr.Status.Token, nil
}

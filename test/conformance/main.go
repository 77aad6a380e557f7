// Command conformance runs the upstream node-conformance tests (e2e.test
// of the pinned Kubernetes release) against hostlet, as `make conformance`:
//
//  1. builds e2e.test, ginkgo, agnhost and nnp (test/cluster/e2e/build.sh,
//     cached by recipe) and checks selection.txt and known-failures.txt
//     against the suite's test list;
//  2. builds the test images under their upstream names (agnhost, busybox,
//     pause, nonewprivs, nonroot, jessie-dnsutils, an nginx stand-in) from
//     local binaries;
//  3. starts the local cluster (test/harness) with hostlet as its only
//     node and imports the images into hostlet's containerd namespace; the
//     [sig-network] tests get a cluster of their own whose node has its own
//     network namespace, --cluster-dns, kube-proxy and CoreDNS;
//  4. runs the selected tests with ginkgo in parallel, then prints a
//     summary and fails if a test outside known-failures.txt failed.
//
// -csi-hostpath runs e2e.test's "[sig-storage] CSI Volumes [Driver:
// csi-hostpath]" testsuites instead of selection.txt's tests, on stand-in
// images for the parts of the driver the module proxy does not serve (see
// csiimages.go); -csi-mock runs the "[sig-storage] CSI Mock" specs on the
// same setup; -skip leaves out tests by name.
//
// -node-kind kubelet runs the same with the upstream kubelet as the node
// (containerd's CRI); -node-kind hostlet,kubelet runs both in turn and
// prints their counts side by side (make conformance-compare). -storage
// runs storage.txt's [sig-storage] specs instead of selection.txt's (make
// conformance-storage); without it, storage.txt's cheap "always" specs run
// with selection.txt's. With -full either kind's two nodes make the
// cluster (full.go, full_kubelet.go).
//
// Results (per node kind and part: JUnit report, e2e output, component
// logs; the summary) go to <results>/<time>, with <results>/latest pointing
// at the newest run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

type config struct {
	procs      int
	results    string
	focus      string
	hostlet    string
	nodeName   string
	timeout    time.Duration
	check      bool
	list       bool
	skipKnown  bool
	keep       bool
	root       string // the hostlet checkout
	cache      string // ~/.cache/hostlet or $HOSTLET_CACHE
	listsDir   string // test/conformance
	keepRuns   int
	extraFlags string
	runtime    string // the hostlet node's OCI runtime (-runtime): runc or crun
	nodeKinds  []nodeKind
	full       bool
	storage    bool
	// csiHostpath runs the csi-hostpath testsuites (csiimages.go).
	csiHostpath bool
	// csiMock runs the CSI Mock specs, on the same setup (csiimages.go).
	csiMock bool
	skip    string
	join    bool // -full's nodes joined with the chart and `hostlet join`
	// nodeE2E runs the kubelet's own suite, e2e_node.test, instead
	// (nodee2e.go).
	nodeE2E bool
	// nodeAll lets -focus pick the suite's specs outside
	// [NodeConformance] too (its [Feature]/[NodeFeature] ones, the CRI
	// specs of issue 48); [Disruptive] ones are still left out.
	nodeAll bool
}

func main() {
	cache := os.Getenv("HOSTLET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "hostlet")
	}
	var c config
	flag.IntVar(&c.procs, "procs", 3, "parallel ginkgo processes")
	flag.StringVar(&c.results, "results", filepath.Join(cache, "conformance", "results"), "directory for the runs' results (outside git)")
	flag.StringVar(&c.focus, "focus", "", "run only the selected tests whose name matches this regexp")
	flag.StringVar(&c.hostlet, "hostlet", "", "hostlet binary (default: build ./cmd/hostlet)")
	flag.StringVar(&c.nodeName, "node", "hostlet-conformance", "node name")
	flag.DurationVar(&c.timeout, "timeout", 3*time.Hour, "ginkgo suite timeout")
	flag.BoolVar(&c.check, "check", false, "only check the lists against the suite")
	flag.BoolVar(&c.list, "list", false, "print the tests that would run and exit")
	flag.BoolVar(&c.skipKnown, "skip-known", false, "do not run the known failures (CI: only regressions can fail it, fast)")
	flag.BoolVar(&c.keep, "keep", false, "keep the cluster's state dir after the run")
	flag.IntVar(&c.keepRuns, "keep-runs", 10, "how many runs' results to keep")
	flag.BoolVar(&c.full, "full", false, "run every [Conformance] test of the suite (not selection.txt's) on a two-node cluster with flannel, kube-proxy and CoreDNS, the [Serial] ones after the others (make conformance-full)")
	flag.BoolVar(&c.storage, "storage", false, "run storage.txt's tests instead of selection.txt's: the [sig-storage] specs one node runs without a CSI driver (in-tree local, hostPath and emptyDir drivers, local PVs, hostPath types), too long for make conformance (make conformance-storage)")
	flag.BoolVar(&c.csiHostpath, "csi-hostpath", false, "run e2e.test's \"[sig-storage] CSI Volumes [Driver: csi-hostpath]\" testsuites (not selection.txt's tests), with stand-ins for the driver images the module proxy does not serve (see csiimages.go)")
	flag.BoolVar(&c.csiMock, "csi-mock", false, "run e2e.test's \"[sig-storage] CSI Mock\" specs (not selection.txt's tests; with -csi-hostpath too): the node's CSI behaviours against e2e.test's own mock driver, reached through the hostpathplugin stand-in's proxy (see csiimages.go)")
	flag.BoolVar(&c.nodeE2E, "node-e2e", false, "run the kubelet's own suite (e2e_node.test of the pinned release: its [NodeConformance] specs, the parallel ones then the [Serial] ones) instead of e2e.test's, on a node in its own network namespace with the kubelet's fixed healthz and read-only ports and a static pod dir (make node-e2e); -focus, -skip, -skip-known, -node-kind apply; node-known-failures.txt lists hostlet's known failures")
	flag.BoolVar(&c.nodeAll, "node-all", false, "with -node-e2e and -focus: choose from all of e2e_node.test's specs, not only its [NodeConformance] ones ([Disruptive] ones are never run)")
	flag.StringVar(&c.skip, "skip", "", "do not run the tests whose name matches this regexp")
	flag.BoolVar(&c.join, "join", true, "with -full: join the nodes as a user does (the chart installed with helm, `hostlet join` with its bootstrap token on each node, serving certificates from the chart's approver); -join=false starts them with certificates the harness mints (quicker)")
	controlPlane := flag.String("control-plane", "", "run the cluster on the control plane (kube-apiserver, controller-manager, scheduler, kubectl, kube-proxy) of another minor version, e.g. 1.37 (test/cluster/kube137, what make compat uses); empty: the pinned 1.35")
	flag.StringVar(&c.runtime, "runtime", "runc", "the hostlet node's OCI runtime: runc, or crun (built by test/cluster/build.sh crun; the node's containerd runs the CRI plugin with crun as its default runtime, as a user configures a host whose pods run on crun)")
	flag.StringVar(&c.extraFlags, "e2e-flags", "", "extra space-separated flags for e2e.test")
	kinds := flag.String("node-kind", "hostlet", "what runs as the node: hostlet, kubelet (the upstream kubelet against containerd's CRI), or hostlet,kubelet (both in turn, results side by side)")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, k := range strings.Split(*kinds, ",") {
		switch nodeKind(k) {
		case kindHostlet, kindKubelet:
			c.nodeKinds = append(c.nodeKinds, nodeKind(k))
		default:
			fmt.Fprintf(os.Stderr, "conformance: -node-kind %q: want hostlet, kubelet or hostlet,kubelet\n", *kinds)
			os.Exit(2)
		}
	}
	if c.runtime != "runc" && (c.runtime != "crun" || c.full) {
		fmt.Fprintf(os.Stderr, "conformance: -runtime %q: want runc, or crun without -full\n", c.runtime)
		os.Exit(2)
	}
	if *controlPlane != "" {
		if !regexp.MustCompile(`^1\.[0-9]+$`).MatchString(*controlPlane) {
			fmt.Fprintf(os.Stderr, "conformance: -control-plane %q: want 1.NN\n", *controlPlane)
			os.Exit(2)
		}
		// The harness builds and runs that version's components under it
		// (test/harness BuildComponents, BuildComponent).
		os.Setenv("HOSTLET_CONTROL_PLANE", *controlPlane)
	}
	c.cache = cache
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// csiDriver says the run deploys e2e.test's CSI drivers: their images,
// a short state dir, the node's root dir shared and given to e2e.test.
func (c config) csiDriver() bool { return c.csiHostpath || c.csiMock }

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s conformance: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, c config) (int, error) {
	var err error
	if c.root, err = repoRoot(); err != nil {
		return 1, err
	}
	c.listsDir = filepath.Join(c.root, "test", "conformance")
	t0 := time.Now()
	tools, err := buildTools(ctx, c.root)
	if err != nil {
		return 1, err
	}
	logf("e2e tooling in %s (%v)", tools.dir, time.Since(t0).Round(time.Second))
	if c.nodeE2E {
		// e2e.test's tooling makes the test images; the suite is another.
		return runNodeE2E(ctx, c, tools)
	}

	sel, known, err := loadLists(ctx, c, tools)
	if err != nil {
		return 1, err
	}
	names := sel.run
	if c.full {
		all, err := tools.listTests(ctx)
		if err != nil {
			return 1, err
		}
		names = conformanceNames(all)
	}
	if c.csiDriver() {
		all, err := tools.listTests(ctx)
		if err != nil {
			return 1, err
		}
		names = nil
		if c.csiHostpath {
			names = csiHostpathNames(all)
		}
		if c.csiMock {
			names = append(names, csiMockNames(all)...)
		}
	}
	if c.skipKnown {
		names = withoutKnown(names, known)
	}
	if names, err = filterNames(names, c.focus); err != nil {
		return 2, err
	}
	if names, err = skipNames(names, c.skip); err != nil {
		return 2, err
	}
	if c.check {
		fmt.Printf("lists consistent with %s: %d tests run, %d skipped, %d known failures\n",
			filepath.Base(tools.e2eTest), len(sel.run), len(sel.skipped), len(known))
		return 0, nil
	}
	if c.list {
		for _, n := range names {
			fmt.Println(n)
		}
		return 0, nil
	}

	runDir, images, err := startRun(ctx, c, tools, tools.listImages)
	if err != nil {
		return 1, err
	}
	var out strings.Builder
	byKind := map[nodeKind]summary{}
	code := 0
	for _, kind := range c.nodeKinds {
		results, elapsed, err := runKind(ctx, c, tools, images, kind, names, runDir)
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
		if kind == kindHostlet {
			s.print(&out, known)
			if c.skipKnown {
				fmt.Fprintf(&out, "\n%d known failures not run (-skip-known)\n", len(sel.run)-len(withoutKnown(sel.run, known)))
			}
		} else {
			// known-failures.txt is hostlet's: the kubelet's failures are
			// this environment's.
			s.print(&out, nil)
		}
		if c.full {
			s.printBySIG(&out)
		}
		cp := ""
		if v := os.Getenv("HOSTLET_CONTROL_PLANE"); v != "" {
			cp = " (control plane " + v + ")"
		}
		fmt.Fprintf(&out, "\n%d tests on %s%s in %v with %d processes; results: %s\n", len(names), kind, cp, elapsed, c.procs, runDir)
		if kind == kindHostlet && !s.ok() {
			code = 1
		}
	}
	if len(c.nodeKinds) > 1 {
		if c.full {
			printSIGComparison(&out, byKind[kindHostlet], byKind[kindKubelet])
		}
		printComparison(&out, names, byKind[kindHostlet], byKind[kindKubelet])
	}
	return verdict(out.String(), runDir, byKind, code, "tests outside known-failures.txt", "failure")
}

// startRun makes the run's results dir and the test images of the suite's
// image list.
func startRun(ctx context.Context, c config, tools tooling, listImages func(context.Context) ([]string, error)) (string, []builtImage, error) {
	runDir, err := newRunDir(c.results, c.keepRuns)
	if err != nil {
		return "", nil, err
	}
	logf("results in %s", runDir)
	list, err := listImages(ctx)
	if err != nil {
		return "", nil, err
	}
	images, err := prepareImages(ctx, c, tools, list)
	return runDir, images, err
}

// verdict writes the run's summary (out) to the terminal and the results
// dir and says whether hostlet's failures were all known; code is non-zero
// when they were not (unknown names those failures, what one failure).
func verdict(out, runDir string, byKind map[nodeKind]summary, code int, unknown, what string) (int, error) {
	os.WriteFile(filepath.Join(runDir, "summary.txt"), []byte(out), 0o644)
	io.WriteString(os.Stdout, out)
	if _, ran := byKind[kindHostlet]; !ran {
		return 0, nil
	}
	if code != 0 {
		fmt.Printf("FAIL: %s failed on hostlet (or the suite itself did)\n", unknown)
		return code, nil
	}
	fmt.Printf("OK: every %s on hostlet is a known one\n", what)
	return 0, nil
}

// runKind runs the tests against a node of kind: the [sig-network] ones in
// a cluster with the node's own network and kube-proxy and CoreDNS, the
// others in the plain one (so a core-only run is what it always was). Each
// part's report, e2e output and logs go to <runDir>/<kind>-<part>.
func runKind(ctx context.Context, c config, tools tooling, images []builtImage, kind nodeKind, names []string, runDir string) ([]result, time.Duration, error) {
	if c.full {
		return runFull(ctx, c, tools, images, kind, names, runDir)
	}
	var all []result
	var elapsed time.Duration
	core, network := splitNetwork(names)
	if c.csiDriver() {
		// The driver's sidecars reach the API server through the
		// kubernetes Service: kube-proxy's cluster.
		core, network = nil, names
	}
	for _, part := range []struct {
		name    string
		tests   []string
		network bool
	}{{"core", core, false}, {"network", network, true}} {
		if len(part.tests) == 0 {
			continue
		}
		dir := filepath.Join(runDir, string(kind)+"-"+part.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, 0, err
		}
		env, err := startCluster(ctx, c, images, kind, part.network)
		if err != nil {
			return nil, 0, err
		}
		logf("running %d %s tests on %s with %d ginkgo processes", len(part.tests), part.name, kind, c.procs)
		t1 := time.Now()
		runErr := runGinkgo(ctx, c, tools, env, part.tests, dir)
		elapsed += time.Since(t1).Round(time.Second)
		env.stop(dir)
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		results, err := readJUnit(filepath.Join(dir, "junit_01.xml"))
		if err != nil {
			return nil, 0, fmt.Errorf("%w (ginkgo: %v); see %s", err, runErr, filepath.Join(dir, "e2e.log"))
		}
		all = append(all, results...)
	}
	return all, elapsed, nil
}

// splitNetwork separates the [sig-network] tests from the others.
func splitNetwork(names []string) (core, network []string) {
	for _, n := range names {
		if strings.HasPrefix(n, "[sig-network]") {
			network = append(network, n)
		} else {
			core = append(core, n)
		}
	}
	return core, network
}

// loadLists reads selection.txt and known-failures.txt and checks them
// against e2e.test --list-tests.
func loadLists(ctx context.Context, c config, tools tooling) (*selection, knownFailures, error) {
	sel, err := readSelection(filepath.Join(c.listsDir, "selection.txt"))
	if err != nil {
		return nil, nil, err
	}
	known, err := readKnownFailures(filepath.Join(c.listsDir, "known-failures.txt"))
	if err != nil {
		return nil, nil, err
	}
	all, err := tools.listTests(ctx)
	if err != nil {
		return nil, nil, err
	}
	storage, err := readSelection(filepath.Join(c.listsDir, "storage.txt"))
	if err != nil {
		return nil, nil, err
	}
	// known-failures.txt may name storage.txt's run tests too; those are
	// checked by checkStorage, the others against selection.txt.
	ofSelection, ofStorage := knownFailures{}, knownFailures{}
	storageRuns := map[string]bool{}
	for _, n := range storage.run {
		storageRuns[n] = true
	}
	for n, r := range known {
		if storageRuns[n] {
			ofStorage[n] = r
		} else {
			ofSelection[n] = r
		}
	}
	problems := append(checkSelection(all, sel, ofSelection), checkStorage(all, sel, storage)...)
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("the lists in %s do not match the suite:\n  %s", c.listsDir, strings.Join(problems, "\n  "))
	}
	if c.storage {
		return storage, ofStorage, nil
	}
	// make conformance also runs storage.txt's cheap "always" tests.
	withAlways := &selection{run: append(append([]string(nil), sel.run...), storage.always...), skipped: sel.skipped}
	for _, n := range storage.always {
		if r, ok := ofStorage[n]; ok {
			ofSelection[n] = r
		}
	}
	return withAlways, ofSelection, nil
}

func withoutKnown(names []string, known knownFailures) []string {
	var out []string
	for _, n := range names {
		if _, k := known[n]; !k {
			out = append(out, n)
		}
	}
	return out
}

func filterNames(names []string, focus string) ([]string, error) {
	if focus == "" {
		return names, nil
	}
	re, err := regexp.Compile(focus)
	if err != nil {
		return nil, fmt.Errorf("-focus: %w", err)
	}
	var out []string
	for _, n := range names {
		if re.MatchString(n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-focus %q matches none of the %d selected tests", focus, len(names))
	}
	return out, nil
}

func skipNames(names []string, skip string) ([]string, error) {
	if skip == "" {
		return names, nil
	}
	re, err := regexp.Compile(skip)
	if err != nil {
		return nil, fmt.Errorf("-skip: %w", err)
	}
	var out []string
	for _, n := range names {
		if !re.MatchString(n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-skip %q leaves none of the %d tests", skip, len(names))
	}
	return out, nil
}

// newRunDir makes <results>/<time>, points <results>/latest at it and
// removes all but the newest keep runs.
func newRunDir(results string, keep int) (string, error) {
	dir := filepath.Join(results, time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	latest := filepath.Join(results, "latest")
	os.Remove(latest)
	if err := os.Symlink(filepath.Base(dir), latest); err != nil {
		return "", err
	}
	runs, _ := filepath.Glob(filepath.Join(results, "[0-9]*-[0-9]*"))
	for i := 0; i < len(runs)-keep; i++ { // Glob sorts: oldest first
		os.RemoveAll(runs[i])
	}
	return dir, nil
}

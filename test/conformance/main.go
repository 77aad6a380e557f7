// Command conformance runs the upstream node-conformance tests (e2e.test
// of the pinned Kubernetes release) against hostlet, as `make conformance`:
//
//  1. builds e2e.test, ginkgo, agnhost and nnp (test/cluster/e2e/build.sh,
//     cached by recipe) and checks selection.txt and known-failures.txt
//     against the suite's test list;
//  2. builds the test images under their upstream names (agnhost, busybox,
//     pause, nonewprivs, nonroot, an nginx stand-in) from local binaries;
//  3. starts the local cluster (test/harness) with hostlet as its only
//     node and imports the images into hostlet's containerd namespace;
//  4. runs the selected tests with ginkgo in parallel, then prints a
//     summary and fails if a test outside known-failures.txt failed.
//
// Results (JUnit report, e2e output, component logs, summary) go to
// <results>/<time>, with <results>/latest pointing at the newest run.
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
	flag.StringVar(&c.extraFlags, "e2e-flags", "", "extra space-separated flags for e2e.test")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
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

	sel, known, err := loadLists(ctx, c, tools)
	if err != nil {
		return 1, err
	}
	names := sel.run
	if c.skipKnown {
		names = withoutKnown(names, known)
	}
	if names, err = filterNames(names, c.focus); err != nil {
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

	runDir, err := newRunDir(c.results, c.keepRuns)
	if err != nil {
		return 1, err
	}
	logf("results in %s", runDir)
	images, err := prepareImages(ctx, c, tools)
	if err != nil {
		return 1, err
	}
	env, err := startCluster(ctx, c, images)
	if err != nil {
		return 1, err
	}
	logf("running %d tests with %d ginkgo processes", len(names), c.procs)
	t1 := time.Now()
	runErr := runGinkgo(ctx, c, tools, env, names, runDir)
	elapsed := time.Since(t1).Round(time.Second)
	env.stop(runDir)
	if ctx.Err() != nil {
		return 130, errors.New("interrupted")
	}

	results, err := readJUnit(filepath.Join(runDir, "junit_01.xml"))
	if err != nil {
		return 1, fmt.Errorf("%w (ginkgo: %v); see %s", err, runErr, filepath.Join(runDir, "e2e.log"))
	}
	s := summarize(results, names, known)
	var out strings.Builder
	s.print(&out, known)
	if c.skipKnown {
		fmt.Fprintf(&out, "\n%d known failures not run (-skip-known)\n", len(sel.run)-len(withoutKnown(sel.run, known)))
	}
	fmt.Fprintf(&out, "\n%d tests in %v with %d processes; results: %s\n", len(names), elapsed, c.procs, runDir)
	os.WriteFile(filepath.Join(runDir, "summary.txt"), []byte(out.String()), 0o644)
	io.WriteString(os.Stdout, out.String())
	if !s.ok() {
		fmt.Println("FAIL: tests outside known-failures.txt failed (or the suite itself did)")
		return 1, nil
	}
	fmt.Println("OK: every failure is a known one")
	return 0, nil
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
	if problems := checkSelection(all, sel, known); len(problems) > 0 {
		return nil, nil, fmt.Errorf("the lists in %s do not match the suite:\n  %s", c.listsDir, strings.Join(problems, "\n  "))
	}
	return sel, known, nil
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

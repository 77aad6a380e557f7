// Command bench (make bench) measures hostlet against the upstream kubelet
// on the same machine in the same run: one local cluster (test/harness) with
// two nodes, hostlet and the kubelet of the pinned Kubernetes release (with
// a CRI-enabled containerd of its own), and the same pod specs and images
// run on each node in turn. It prints a side-by-side table and writes it as
// markdown to <cache>/bench/latest.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
)

// Node names of the two contestants.
const (
	hostletNode = "bench-hostlet"
	kubeletNode = "bench-kubelet"
)

type config struct {
	pods, rounds, exits, probed int
	window, idle                time.Duration
	out, profile                string
	nodes                       string
	keep                        bool
	// hostletNet is the hostlet node's pod network: "default" (its own
	// bridge network over the node's pod CIDR, --cni-default-bridge) or
	// "conflist" (the harness's bridge conflist, exec'd like any CNI config).
	hostletNet string
	// runtime and kubeletRuntime are the nodes' OCI runtimes (-runtime,
	// -kubelet-runtime): "runc" or "crun", their containerd's default.
	runtime, kubeletRuntime string
	// density are the pod counts of the density curve (-density), each
	// held steady for densityWindow.
	density       []int
	densityWindow time.Duration
	// joins is how many nodes of each kind the join scenario joins.
	joins int
	// The images scenario: the big image's size in MB, its pods per case,
	// and the hostlet nodes pulling at once in the multi-node cases.
	imageMB, imagePods, imageNodes int
	// stsReplicas is the statefulset scenario's replica count.
	stsReplicas int
	// scenarios run (scenarioNames); the others are skipped and left out
	// of the table.
	scenarios map[string]bool
}

// scenarioNames are the measurements -scenarios picks from: "burst" (the
// rounds of -pods started and deleted, RSS idle), "exit" (exit latency),
// "probed" (the probed burst and the steady window), "density" (the pods
// of -density held steady, one count after the other) and "join" (a bare
// host joined with a bootstrap token until its first pod runs) and
// "images" (pods of a big image on fresh nodes: normal and lazy pulls,
// several nodes at once with and without the registry mirror) and
// "statefulset" (a StatefulSet with a volumeClaimTemplate on CSI, created
// until all Ready, then deleted with its claims until all pods, PVs and
// mounts are gone).
var scenarioNames = []string{"burst", "exit", "probed", "density", "join", "images", "statefulset"}

// parseCounts reads -density: comma-separated positive pod counts, kept in
// the order given.
func parseCounts(list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("pod count %q: not a positive number", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no pod count")
	}
	return out, nil
}

// maxPods is the pod capacity both nodes get: the kubelet's default 110,
// or the density curve's largest count when it runs and is larger.
func maxPods(c config) int {
	n := 110
	if c.scenarios["density"] {
		n = max(n, slices.Max(c.density))
	}
	return n
}

// parseScenarios reads -scenarios: a comma-separated subset of
// scenarioNames.
func parseScenarios(list string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(scenarioNames, s) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(scenarioNames, ", "))
		}
		m[s] = true
	}
	if len(m) == 0 {
		return nil, errors.New("no scenario to run")
	}
	return m, nil
}

func main() {
	var c config
	flag.IntVar(&c.pods, "pods", 20, "pods started (and deleted) at once")
	flag.IntVar(&c.rounds, "rounds", 3, "bursts of -pods, each reusing the names of the one deleted before it")
	flag.DurationVar(&c.idle, "idle", 20*time.Second, "how long the first burst's pods stay idle before RSS is measured")
	flag.IntVar(&c.exits, "exits", 10, "container exits timed")
	flag.IntVar(&c.probed, "probed", 100, "pods with a 1 s readiness probe for the steady-cost window")
	flag.DurationVar(&c.window, "window", time.Minute, "steady-cost window")
	flag.StringVar(&c.out, "out", "", "markdown results file (default <cache>/bench/latest.md)")
	flag.StringVar(&c.profile, "profile", "", "directory for CPU, block and mutex profiles of hostlet over the first burst's and the probed burst's start and delete, and the steady window (hostlet built with a profiling hook)")
	flag.StringVar(&c.nodes, "nodes", "hostlet,kubelet", "nodes to run: hostlet, kubelet or both")
	flag.BoolVar(&c.keep, "keep", false, "keep the cluster dir (logs) after the run")
	flag.StringVar(&c.hostletNet, "hostlet-network", "default", "the hostlet node's pod network: default (its own bridge network over the node's pod CIDR, as a node without a CNI DaemonSet runs) or conflist (the harness's bridge conflist in --cni-conf-dir, exec'd as any cluster's CNI config)")
	density := flag.String("density", "30,110,250", "pod counts of the density curve, comma-separated; both nodes get --max-pods of the largest (at least 110)")
	flag.DurationVar(&c.densityWindow, "density-window", 30*time.Second, "how long each density point is held steady while CPU, RSS and API writes are measured")
	flag.IntVar(&c.joins, "joins", 3, "nodes of each kind joined one after the other (join scenario); the table gives the median of each phase")
	flag.IntVar(&c.imageMB, "image-mb", 500, "images scenario: layer content of the big image in MB (incompressible data, in layers of 100 MB)")
	flag.IntVar(&c.imagePods, "image-pods", 30, "images scenario: pods of the big image started at once in each case (spread over the case's nodes)")
	flag.IntVar(&c.imageNodes, "image-nodes", 3, "images scenario: hostlet nodes pulling at once in the multi-node cases")
	flag.IntVar(&c.stsReplicas, "sts-replicas", 20, "statefulset scenario: replicas of the StatefulSet, each with a CSI volume of its volumeClaimTemplate")
	scenarios := flag.String("scenarios", strings.Join(scenarioNames, ","), "measurements to run, comma-separated: burst (rounds of -pods, RSS idle), exit, probed (the probed burst and steady window), density (-density pods held steady), join (bootstrap token to first pod Running), images (a big image: normal, lazy, multi-node and mirrored pulls), statefulset (a StatefulSet on CSI volumes: create → all Ready, delete with its claims → pods, PVs, mounts gone)")
	flag.StringVar(&c.runtime, "runtime", "runc", "the hostlet node's OCI runtime: runc, or crun (test/cluster/build.sh crun; its containerd then runs the CRI plugin with crun as the default runtime, as a user configures it, and the node's pods run on crun)")
	flag.StringVar(&c.kubeletRuntime, "kubelet-runtime", "runc", "the kubelet node's OCI runtime: runc or crun (its CRI containerd's default runtime)")
	verbose := flag.Bool("v", false, "debug logging")
	flag.Parse()
	var err error
	if c.scenarios, err = parseScenarios(*scenarios); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if c.hostletNet != "default" && c.hostletNet != "conflist" {
		fmt.Fprintf(os.Stderr, "-hostlet-network: want default or conflist, got %q\n", c.hostletNet)
		os.Exit(2)
	}
	for _, rt := range []string{c.runtime, c.kubeletRuntime} {
		if rt != "runc" && rt != "crun" {
			fmt.Fprintf(os.Stderr, "-runtime, -kubelet-runtime: want runc or crun, got %q\n", rt)
			os.Exit(2)
		}
	}
	if c.imageMB < 1 || c.imagePods < 1 || c.imageNodes < 1 {
		fmt.Fprintln(os.Stderr, "-image-mb, -image-pods, -image-nodes: at least 1")
		os.Exit(2)
	}
	if c.stsReplicas < 1 {
		fmt.Fprintln(os.Stderr, "-sts-replicas: at least 1")
		os.Exit(2)
	}
	if c.joins < 1 {
		fmt.Fprintln(os.Stderr, "-joins: at least 1")
		os.Exit(2)
	}
	if c.density, err = parseCounts(*density); err != nil {
		fmt.Fprintln(os.Stderr, "-density:", err)
		os.Exit(2)
	}
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000"})
	if *verbose {
		log.SetLevel(log.DebugLevel)
	}
	if c.out == "" {
		c.out = filepath.Join(cacheDir(), "bench", "latest.md")
	}
	// ^C still cleans up: the context ends the measurement, the deferred
	// cleanups run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	if err := run(ctx, c); err != nil {
		log.Errorf("bench failed after %v: %v", time.Since(t0).Round(time.Second), err)
		os.Exit(1)
	}
	log.Infof("bench done in %v", time.Since(t0).Round(time.Second))
}

// cacheDir is $HOSTLET_CACHE or ~/.cache/hostlet, as build.sh has it.
func cacheDir() string {
	if d := os.Getenv("HOSTLET_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "hostlet-cache")
	}
	return filepath.Join(home, ".cache", "hostlet")
}

func run(ctx context.Context, c config) error {
	var cl cleanups
	defer cl.run()
	env, err := setup(ctx, c, &cl)
	if err != nil {
		return err
	}
	b := &bench{cs: env.cluster.Client(), cluster: env.cluster, audit: env.audit, cfg: c, cl: &cl, hostletBin: env.hostletBin, imgs: env.imgs}
	for _, t := range env.targets {
		if t.cri != nil {
			b.hostsDirs = append(b.hostsDirs, t.cri.hostsDir())
		}
	}
	var labels []string
	var results []*nodeResult
	for _, t := range env.targets {
		r, err := b.runNode(ctx, t)
		if err != nil {
			return fmt.Errorf("%s: %w", t.label, err)
		}
		labels, results = append(labels, t.label), append(results, r)
	}
	tbl := table(c, labels, results)
	fmt.Println()
	fmt.Println(tbl)
	md := header(c, env) + tbl
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Printf("results: %s\n", c.out)
	for i, r := range results {
		if n := r.lost(); n > 0 {
			err = errors.Join(err, fmt.Errorf("%s lost or left stuck %d pods (see the bursts table)", labels[i], n))
		}
	}
	return err
}

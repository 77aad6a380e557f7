package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
)

// -full: the whole [Conformance] focus of e2e.test (not selection.txt's
// node-level part) on a cluster shaped like a real one: two hostlet nodes,
// each in its own network namespace with its own containerd (the
// cluster's node and a Host beside it, as TestFlannelTwoHosts builds
// them), flannel (host-gw) as the cluster's CNI DaemonSet, kube-proxy and
// CoreDNS, and an API server that reaches pods (webhooks, aggregated APIs)
// at their endpoints' addresses, routed into the nodes' namespaces.

// fullNodeCIDRMask cuts the cluster's pod /24 in two: 126 pod addresses
// per node, as many as its 110 pods.
const fullNodeCIDRMask = 25

// fullNodes are the two nodes' names; the second runs on Host "b".
var fullNodes = [2]string{"hostlet-a", "hostlet-b"}

// conformanceNames is every [Conformance] test of the suite.
func conformanceNames(all []listedTest) []string {
	var out []string
	for _, t := range all {
		if strings.Contains(t.name, "[Conformance]") {
			out = append(out, t.name)
		}
	}
	sort.Strings(out)
	return out
}

// startFullCluster starts the two-node cluster -full runs on.
func startFullCluster(ctx context.Context, c config, imgs []builtImage) (*testEnv, error) {
	bin := c.hostlet
	if bin == "" {
		var err error
		if bin, err = harness.BuildHostlet(ctx); err != nil {
			return nil, err
		}
	}
	env, shared, err := startFullBase(ctx, c)
	if err != nil {
		return nil, err
	}
	cl, host := env.cluster, env.hosts[0]
	fail := func(err error) (*testEnv, error) {
		env.stopNode()
		cl.Stop()
		return nil, err
	}
	imports := func(ctx context.Context, archive string) error {
		if err := cl.ImportImage(ctx, archive); err != nil {
			return err
		}
		return host.ImportImage(ctx, archive)
	}
	for _, img := range imgs {
		if err := imports(ctx, img.archive); err != nil {
			return fail(err)
		}
	}
	logf("imported %d images into both nodes' containerd", len(imgs))
	if c.join {
		err = joinFullNodes(ctx, c, env, bin, shared, imports)
	} else {
		err = startFullNodes(ctx, env, bin, shared)
	}
	if err != nil {
		return fail(err)
	}
	env.node = env.nodes[0]
	for i, name := range fullNodes {
		if _, err := cl.WaitForNode(ctx, name, 2*time.Minute, func(n *v1.Node) (bool, error) {
			return len(n.Spec.PodCIDRs) == 1, nil
		}); err != nil {
			// The cluster's dir goes with it: say here why the node is not.
			return fail(fmt.Errorf("node %s with a pod CIDR: %w; the end of its log:\n%s", name, err, tailFile(env.nodes[i].LogPath(), 4096)))
		}
	}
	if err := deployFullAddons(ctx, c, cl, host, shared, imports, fullNodes[:]); err != nil {
		return fail(err)
	}
	if c.join {
		for i, ip := range []string{cl.NodeIP(), host.IP()} {
			if err := waitServingCert(ctx, cl.CACertFile(), ip, env.nodes[i].Port()); err != nil {
				return fail(err)
			}
		}
		logf("both nodes serve certificates of the cluster CA")
	}
	return env, nil
}

// startFullBase starts what both kinds of -full cluster have: the control
// plane (its node network namespace) and Host b, with the flannel dirs
// both nodes see. The harness's API server reaches webhooks and
// aggregated APIs at their endpoints (--enable-aggregator-routing): the
// pod /24 is routed from the root namespace to the node's, and flannel
// routes each node's part on to it.
func startFullBase(ctx context.Context, c config) (*testEnv, harness.FlannelDirs, error) {
	cl, err := harness.Start(ctx, harness.Options{Logf: logf, KeepDir: c.keep, NodeNetns: true,
		NodeCIDRMaskSize: fullNodeCIDRMask})
	if err != nil {
		return nil, harness.FlannelDirs{}, err
	}
	// The flannel dirs live in the cluster's dir (removed with it); the
	// Host sees its own at the same paths.
	shared := harness.NewFlannelDirs(filepath.Join(cl.Dir(), "flannel"))
	own := harness.NewFlannelDirs(filepath.Join(cl.Dir(), "flannel-b"))
	for _, d := range []string{shared.Bin, shared.Conf, shared.Run, shared.Data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			cl.Stop()
			return nil, shared, err
		}
	}
	host, err := cl.AddHost(ctx, "b", harness.HostOptions{Binds: shared.BindsOver(own)})
	if err != nil {
		cl.Stop()
		return nil, shared, err
	}
	return &testEnv{cluster: cl, hosts: []*harness.Host{host}}, shared, nil
}

// startFullNodes starts the two hostlets with the harness's credentials
// (-join=false): quicker to set up, nothing of the chart or join involved.
func startFullNodes(ctx context.Context, env *testEnv, bin string, shared harness.FlannelDirs) error {
	extra := append(shared.HostletArgs(), "--cluster-dns", harness.ClusterDNS, "--cluster-domain", harness.ClusterDomain)
	for i, name := range fullNodes {
		o := harness.HostletOptions{Binary: bin, NodeName: name, NoWaitReady: true, ExtraArgs: extra}
		if i == 1 {
			o.Host = env.hosts[0]
		}
		h, err := env.cluster.StartHostlet(ctx, o)
		if err != nil {
			return fmt.Errorf("hostlet %s: %w", name, err)
		}
		env.nodes = append(env.nodes, h)
	}
	return nil
}

// joinFullNodes installs the chart and joins the two nodes with `hostlet
// join` (-join), each on its machine, pointed at flannel's dirs.
func joinFullNodes(ctx context.Context, c config, env *testEnv, bin string, shared harness.FlannelDirs, imports func(context.Context, string) error) error {
	t0 := time.Now()
	cl := env.cluster
	server, token, err := installFullChart(ctx, c, cl, imports)
	if err != nil {
		return err
	}
	caHash, err := harness.CACertHash(cl.CACertFile())
	if err != nil {
		return err
	}
	cni := []string{"--cni-conf-dir", shared.Conf, "--cni-bin-dir", shared.Bin}
	for i, name := range fullNodes {
		var host *harness.Host
		if i == 1 {
			host = env.hosts[0]
		}
		h, err := joinFullNode(ctx, cl, host, bin, name, server, token, caHash, cni)
		if err != nil {
			return err
		}
		env.nodes = append(env.nodes, h)
	}
	logf("chart installed and both nodes joined in %v", time.Since(t0).Round(time.Second))
	return nil
}

// runFull runs the tests on the two-node cluster: the parallel ones with
// c.procs processes, then the [Serial] ones one at a time (as upstream's
// conformance image runs them), each part's report in
// <runDir>/<kind>-full-{parallel,serial}.
func runFull(ctx context.Context, c config, tools tooling, images []builtImage, kind nodeKind, names []string, runDir string) ([]result, time.Duration, error) {
	var parallel, serial []string
	for _, n := range names {
		if strings.Contains(n, "[Serial]") {
			serial = append(serial, n)
		} else {
			parallel = append(parallel, n)
		}
	}
	start := startFullCluster
	if kind == kindKubelet {
		start = startFullKubeletCluster
	}
	env, err := start(ctx, c, images)
	if err != nil {
		return nil, 0, err
	}
	var all []result
	var elapsed time.Duration
	defer func() { env.stop(filepath.Join(runDir, string(kind)+"-full")) }()
	for _, part := range []struct {
		name  string
		tests []string
		procs int
	}{{"parallel", parallel, c.procs}, {"serial", serial, 1}} {
		if len(part.tests) == 0 {
			continue
		}
		dir := filepath.Join(runDir, string(kind)+"-full-"+part.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, 0, err
		}
		pc := c
		pc.procs = part.procs
		logf("running %d %s tests on %s with %d ginkgo processes", len(part.tests), part.name, kind, pc.procs)
		t1 := time.Now()
		runErr := runGinkgo(ctx, pc, tools, env, part.tests, dir)
		elapsed += time.Since(t1).Round(time.Second)
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

// sigOf is the [sig-x] a test's name starts with ("other" if none).
func sigOf(name string) string {
	if strings.HasPrefix(name, "[sig-") {
		if i := strings.Index(name, "]"); i > 0 {
			return name[1:i]
		}
	}
	return "other"
}

// sigCounts are one SIG's outcomes.
type sigCounts struct{ passed, failed, skipped, missing int }

// bySIG counts the summary's outcomes per SIG.
func (s summary) bySIG() map[string]*sigCounts {
	out := map[string]*sigCounts{}
	get := func(name string) *sigCounts {
		sig := sigOf(name)
		if out[sig] == nil {
			out[sig] = &sigCounts{}
		}
		return out[sig]
	}
	for _, r := range s.passed {
		get(r.name).passed++
	}
	for _, r := range s.failed {
		get(r.name).failed++
	}
	for _, r := range s.skipped {
		get(r.name).skipped++
	}
	for _, n := range s.missing {
		get(n).missing++
	}
	return out
}

// printBySIG writes the per-SIG table, largest SIG first.
func (s summary) printBySIG(w io.Writer) {
	counts := s.bySIG()
	sigs := make([]string, 0, len(counts))
	for sig := range counts {
		sigs = append(sigs, sig)
	}
	total := func(c *sigCounts) int { return c.passed + c.failed + c.skipped + c.missing }
	sort.Slice(sigs, func(i, j int) bool {
		if a, b := total(counts[sigs[i]]), total(counts[sigs[j]]); a != b {
			return a > b
		}
		return sigs[i] < sigs[j]
	})
	fmt.Fprintf(w, "\n%-22s %6s %6s %6s %7s %7s\n", "SIG", "tests", "passed", "failed", "skipped", "missing")
	var sum sigCounts
	for _, sig := range sigs {
		c := counts[sig]
		fmt.Fprintf(w, "%-22s %6d %6d %6d %7d %7d\n", sig, total(c), c.passed, c.failed, c.skipped, c.missing)
		sum.passed, sum.failed, sum.skipped, sum.missing = sum.passed+c.passed, sum.failed+c.failed, sum.skipped+c.skipped, sum.missing+c.missing
	}
	fmt.Fprintf(w, "%-22s %6d %6d %6d %7d %7d\n", "total", total(&sum), sum.passed, sum.failed, sum.skipped, sum.missing)
}

// tailFile is the last n bytes of a file (or why not).
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/hostlet/hostlet/test/harness"
)

// prepareImages builds the archives of every upstream image of list (the
// suite's --list-images) that has a local stand-in.
func prepareImages(ctx context.Context, c config, tools tooling, list []string) ([]builtImage, error) {
	t0 := time.Now()
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
	if c.full {
		for ref, k := range wantedFullImages(list) {
			wanted[ref] = k
		}
		if err := readFullInputs(ctx, c.root, scratch, &in); err != nil {
			return nil, err
		}
	}
	imgs, err := buildImages(wanted, in, filepath.Join(c.cache, "conformance", "images"))
	if err != nil {
		return nil, err
	}
	if c.csiDriver() {
		csi, err := readCSIInputs(ctx, c.root, scratch, &in)
		if err != nil {
			return nil, err
		}
		// A dir of their own, per checkout: buildImages removes the
		// archives its images dir has of other inputs, and a usual run,
		// or another checkout's CSI run (other stand-ins) at the same
		// time, would take these for such and remove them before this
		// run imports them.
		more, err := buildImages(csi, in, filepath.Join(c.cache, "conformance", "csi-images", filepath.Base(c.root)))
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, more...)
		for ref, k := range csi {
			wanted[ref] = k
		}
	}
	logf("%d test images (%d refs) ready in %v", len(imgs), len(wanted), time.Since(t0).Round(time.Second))
	return imgs, nil
}

// nodeKind is what runs as the cluster's node: hostlet, or the upstream
// kubelet (same release as the suite) against containerd's CRI, to tell
// hostlet's failures from this environment's.
type nodeKind string

const (
	kindHostlet nodeKind = "hostlet"
	kindKubelet nodeKind = "kubelet"
)

// testEnv is the running cluster with its node.
type testEnv struct {
	cluster *harness.Cluster
	node    *harness.Hostlet
	kubelet *harness.Kubelet
	// -full's: both nodes, and the Host the second runs on.
	nodes    []*harness.Hostlet
	kubelets []*harness.Kubelet // -full -node-kind kubelet's
	hosts    []*harness.Host
	// ownDir is the cluster's Options.Dir when this run made it (removed
	// after the cluster unless -keep).
	ownDir string
	// binds are host paths the node's dirs were bound onto for the run
	// (nodee2e.go's kubeletDir), unmounted after it.
	binds []string
	// hostDirs are host paths the tests' manifests make (hostPath
	// DirectoryOrCreate) that did not exist before the run: removed after.
	hostDirs []string
}

// csiHostpathDataDir is where upstream's hostpath manifest keeps the
// driver's volumes on the host (a hostPath it creates, not under the
// node's root dir).
const csiHostpathDataDir = "/var/lib/csi-hostpath-data"

// startCluster starts a cluster with one node of kind. With network the
// node lives in its own network namespace (a real address), gets
// --cluster-dns, and kube-proxy and CoreDNS are deployed: what the
// [sig-network] tests need. The kubelet always gets its own namespace: it
// refuses a loopback node IP.
func startCluster(ctx context.Context, c config, imgs []builtImage, kind nodeKind, network bool) (*testEnv, error) {
	bin := c.hostlet
	if kind == kindHostlet && bin == "" {
		var err error
		if bin, err = harness.BuildHostlet(ctx); err != nil {
			return nil, err
		}
	}
	// The node e2e suite runs on the node: in its namespace (nodee2e.go).
	opts := harness.Options{Logf: logf, KeepDir: c.keep, NodeNetns: network || kind == kindKubelet || c.nodeE2E}
	if kind == kindHostlet {
		opts.Runtime = c.runtime
	}
	if c.csiDriver() {
		// Unix socket paths end at 107 bytes: the node's
		// <root-dir>/plugins_registry/csi-hostpath-<namespace>-reg.sock
		// outgrows that under the default /tmp/hostlet-e2e-<n>/
		// hostlet/hostlet-conformance (and the node, as the kubelet does,
		// cannot dial it). A short dir and short node names keep it
		// below, as /var/lib/kubelet does on a real node.
		var err error
		if opts.Dir, err = os.MkdirTemp("", "hc"); err != nil {
			return nil, err
		}
	}
	cl, err := harness.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	env := &testEnv{cluster: cl}
	// The snapshot specs of both (the csi-hostpath testsuites', the CSI
	// mock's [Feature:VolumeSnapshotDataSource] ones) need the
	// VolumeSnapshot CRDs and their controller.
	if c.csiDriver() {
		if err := cl.StartSnapshotController(ctx); err != nil {
			cl.Stop()
			return nil, fmt.Errorf("snapshot-controller: %w", err)
		}
	}
	if !c.keep {
		env.ownDir = opts.Dir
		if _, err := os.Lstat(csiHostpathDataDir); c.csiDriver() && os.IsNotExist(err) {
			env.hostDirs = append(env.hostDirs, csiHostpathDataDir)
		}
	}
	fail := func(err error) (*testEnv, error) {
		env.stopNode()
		cl.Stop()
		return nil, err
	}
	name := nodeName(c, kind)
	var importImage func(context.Context, string) error
	switch kind {
	case kindKubelet:
		opts := harness.KubeletOptions{NodeName: name, SandboxImage: pauseRef(imgs), SharedRootDir: c.csiDriver()}
		for _, img := range imgs {
			opts.Images = append(opts.Images, img.archive)
		}
		if network {
			opts.ClusterDNS, opts.ClusterDomain = harness.ClusterDNS, harness.ClusterDomain
		}
		if c.nodeE2E {
			nodeE2EKubeletOptions(cl, &opts)
		}
		if env.kubelet, err = cl.StartKubelet(ctx, opts); err != nil {
			return fail(fmt.Errorf("kubelet: %w (logs: %s)", err, cl.LogDir()))
		}
		importImage = env.kubelet.ImportImage
	default:
		for _, img := range imgs {
			if err := cl.ImportImage(ctx, img.archive); err != nil {
				return fail(err)
			}
		}
		logf("imported %d images into containerd namespace %s", len(imgs), harness.ContainerdNamespace)
		var extra []string
		if network {
			extra = []string{"--cluster-dns", harness.ClusterDNS, "--cluster-domain", harness.ClusterDomain}
		}
		if c.nodeE2E {
			more, err := nodeE2EHostletArgs(cl)
			if err != nil {
				return fail(err)
			}
			extra = append(extra, more...)
		}
		if env.node, err = cl.StartHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: name, ExtraArgs: extra}); err != nil {
			return fail(fmt.Errorf("hostlet: %w (log: %s)", err, env.logTail()))
		}
		importImage = cl.ImportImage
	}
	if c.nodeE2E {
		if err := env.linkKubeletDir(kind); err != nil {
			return fail(err)
		}
	}
	if network {
		t0 := time.Now()
		if err := cl.DeployNetworkAddons(ctx, harness.AddonImages{ImageDir: filepath.Join(c.cache, "images"), Import: importImage}); err != nil {
			return fail(err)
		}
		logf("kube-proxy and CoreDNS up in %v", time.Since(t0).Round(time.Second))
	}
	logf("cluster up: node %s (%s) ready, kubeconfig %s", name, kind, cl.KubeconfigPath())
	return env, nil
}

// nodeName is -node for hostlet; the kubelet's node is named for it.
// -csi-hostpath's and -csi-mock's nodes are named for their kind (short: see startCluster).
func nodeName(c config, kind nodeKind) string {
	if c.csiDriver() {
		return string(kind)
	}
	if kind == kindKubelet {
		return "kubelet-conformance"
	}
	return c.nodeName
}

// pauseRef is the reference of the pause image among imgs: the CRI's
// sandbox image.
func pauseRef(imgs []builtImage) string {
	for _, img := range imgs {
		for _, r := range img.refs {
			if strings.Contains(r, "/pause:") {
				return r
			}
		}
	}
	return ""
}

func (e *testEnv) stopNode() {
	if e.kubelet != nil {
		e.kubelet.Stop()
	}
	// Last started first: each put back the kernel settings it found.
	for i := len(e.kubelets) - 1; i >= 0; i-- {
		e.kubelets[i].Stop()
	}
	for _, h := range e.hosts { // before the cluster whose node links them
		h.Stop()
	}
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
	e.stopNode()
	e.cluster.Stop()
	if e.ownDir != "" {
		// The harness removes only its own entries from a Dir it was
		// given: the kubelet's dir (and its root dir's mounts) and the
		// addons' manifests stay. Unmount deepest first, then remove.
		if err := removeOwnDir(e.ownDir); err != nil {
			logf("removing %s: %v", e.ownDir, err)
		}
	}
	for _, b := range e.binds {
		if err := syscall.Unmount(b, syscall.MNT_DETACH); err != nil {
			logf("unmounting %s: %v", b, err)
		}
	}
	for _, d := range e.hostDirs {
		if err := removeOwnDir(d); err != nil {
			logf("removing %s: %v", d, err)
		}
	}
}

func removeOwnDir(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	for _, m := range mounts {
		if err := syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			return fmt.Errorf("unmount %s: %w", m.Mountpoint, err)
		}
	}
	return os.RemoveAll(dir)
}

// rootDir is the node's --root-dir.
func (e *testEnv) rootDir() string {
	if e.kubelet != nil {
		return e.kubelet.RootDir()
	}
	return e.node.RootDir()
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
	if c.csiDriver() {
		// The hostpath deployment's host paths and the registration path
		// it gives the node are under the node's root dir.
		args = append(args, "--kubelet-root-dir="+env.rootDir())
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

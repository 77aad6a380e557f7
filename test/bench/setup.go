package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hostlet/hostlet/test/harness"
)

// benchEnv is the running cluster with both nodes.
type benchEnv struct {
	cluster        *harness.Cluster
	audit          *auditLog
	targets        []target
	kubeletVersion string
	hostletCommit  string
	// kubeletCrun is crun's binary when the kubelet's containerd runs it
	// (-kubelet-runtime crun).
	kubeletCrun string
	hostletBin  string
	imgs        *benchImages
}

// setup builds what is missing, prepares the host (kernel settings saved,
// a cgroup root, the dummy link, the kubelet's CNI config), starts the
// cluster with hostlet and with the kubelet and its CRI containerd, and
// registers the undoing of each step in cl as soon as it is done.
func setup(ctx context.Context, c config, cl *cleanups) (*benchEnv, error) {
	env := &benchEnv{}
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache := cacheDir()
	unlock, err := lockRun(filepath.Join(cache, "bench", "lock"))
	if err != nil {
		return nil, err
	}
	cl.add("unlock", unlock)
	work := filepath.Join(cache, "bench", "run")
	if err := os.RemoveAll(work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	log.Info("building images, hostlet and the kubelet (cached)")
	imgs, err := buildImages(ctx, root, cache)
	if err != nil {
		return nil, err
	}
	hostletBin, err := harness.BuildHostlet(ctx)
	if err != nil {
		return nil, err
	}
	var hostletEnv []string
	if c.profile != "" {
		if c.profile, err = filepath.Abs(c.profile); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(c.profile, 0o755); err != nil {
			return nil, err
		}
		hostletBin = filepath.Join(cache, "bench", "hostlet-profiling")
		if err := buildProfilingHostlet(ctx, root, hostletBin); err != nil {
			return nil, err
		}
		hostletEnv = []string{"HOSTLET_BENCH_PROFILE_DIR=" + c.profile}
	}
	if out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "cluster", "build.sh"), "kubelet").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build.sh kubelet: %w\n%s", err, out)
	}
	env.hostletCommit = gitDescribe(root)
	env.hostletBin, env.imgs = hostletBin, imgs

	restore, err := saveSysctls(filepath.Join(cache, "bench", "sysctls.json"))
	if err != nil {
		return nil, err
	}
	cl.add("restore kernel settings the kubelet changed", restore)
	// Links a killed run left behind; its cgroups once the harness's Start
	// has swept its containers.
	for _, l := range []string{dummyLink, kubeletBridge, hostletBridge} {
		if err := deleteLink(l); err != nil {
			return nil, err
		}
	}
	cl.add("remove cgroup root "+cgroupRoot, func() error { return harness.RemoveCgroupRoot(cgroupRoot) })
	if err := removeCPUGroups(); err != nil {
		return nil, fmt.Errorf("a previous run's cpuacct groups: %w", err)
	}
	cl.add("remove the cpuacct groups", removeCPUGroups)
	nodeIP, err := addDummyLink()
	if err != nil {
		return nil, err
	}
	cl.add("delete link "+dummyLink, func() error { return deleteLink(dummyLink) })
	kn, err := writeKubeletCNI(filepath.Join(work, "cni"))
	if err != nil {
		return nil, err
	}
	cl.add("delete bridge "+kn.bridge, func() error { return deleteLink(kn.bridge) })
	nodes := []string{hostletNode, kubeletNode}
	for i := range c.joins {
		nodes = append(nodes, joinName(hostletNode, i), joinName(kubeletNode, i))
	}
	if env.audit, err = newAuditLog(work, nodes...); err != nil {
		return nil, err
	}

	cluster, err := harness.Start(ctx, harness.Options{
		Logf: func(f string, a ...any) { log.Debugf(f, a...) }, KeepDir: c.keep, APIServerArgs: env.audit.apiserverArgs(),
		Runtime: c.runtime,
	})
	if err != nil {
		return nil, err
	}
	env.cluster = cluster
	cl.add("stop the cluster", func() error { cluster.Stop(); return nil })
	log.Infof("cluster up in %v, dir %s", cluster.StartDuration.Round(time.Millisecond), cluster.Dir())
	if c.scenarios["density"] {
		// Every pod of the largest point needs an address of its node's
		// pod subnet at once.
		for _, n := range []struct{ node, subnet string }{{hostletNode, cluster.PodSubnet()}, {kubeletNode, kn.subnet}} {
			if err := subnetFits(n.subnet, slices.Max(c.density)); err != nil {
				return nil, fmt.Errorf("%s: %w", n.node, err)
			}
		}
	}
	if err := harness.RemoveCgroupRoot(cgroupRoot); err != nil {
		return nil, fmt.Errorf("a previous run's cgroups: %w", err)
	}
	if err := harness.MakeCgroupRoot(cgroupRoot); err != nil {
		return nil, err
	}
	control, err := newControlPlaneGroup(cluster.Pid)
	if err != nil {
		return nil, err
	}
	for _, a := range imgs.test {
		if err := cluster.ImportImage(ctx, a); err != nil {
			return nil, err
		}
	}
	if strings.Contains(c.nodes, "hostlet") {
		// --v 2 is hostlet's default; the harness's --v 4 would bill
		// debug logging to it.
		args := []string{"--v", "2"}
		var podCIDR string
		if c.hostletNet == "default" {
			var confDir string
			if confDir, podCIDR, err = hostletDefaultNetwork(filepath.Join(work, "cni")); err != nil {
				return nil, err
			}
			args = append(args, "--cni-conf-dir", confDir, "--cni-default-bridge", hostletBridge)
			cl.add("delete bridge "+hostletBridge, func() error { return deleteLink(hostletBridge) })
		}
		h, err := cluster.StartHostlet(ctx, harness.HostletOptions{
			Binary: hostletBin, NodeName: hostletNode, ExtraArgs: append(args, "--max-pods", fmt.Sprint(maxPods(c))), Env: hostletEnv, NoWaitReady: podCIDR != "",
		})
		if err != nil {
			return nil, err
		}
		if podCIDR != "" {
			if err := setPodCIDR(ctx, cluster, hostletNode, podCIDR); err != nil {
				return nil, err
			}
			if err := cluster.WaitNodeReady(ctx, hostletNode); err != nil {
				return nil, err
			}
		}
		t := target{node: hostletNode, label: "hostlet", ns: "bench-hostlet", agentPid: h.Pid(),
			runtimePid: cluster.Pid("containerd"), socket: cluster.ContainerdSocket(), rootDir: h.RootDir()}
		if c.profile != "" {
			t.prof = &profiler{dir: c.profile, pid: h.Pid()}
		}
		if err := t.countCPU(h.CgroupRoot(), control); err != nil {
			return nil, err
		}
		t.joiner = &hostletJoiner{c: cluster, bin: hostletBin}
		env.targets = append(env.targets, t)
	}
	if c.kubeletRuntime == "crun" {
		if env.kubeletCrun, err = harness.BuildCrun(ctx, log.Infof); err != nil {
			return nil, err
		}
	}
	if strings.Contains(c.nodes, "kubelet") {
		t, err := startKubeletNode(ctx, cluster, imgs, kn.confDir, nodeIP, maxPods(c), env.kubeletCrun, cl)
		if err != nil {
			return nil, err
		}
		if err := t.countCPU(cgroupRoot, control); err != nil {
			return nil, err
		}
		t.joiner = &kubeletJoiner{c: cluster, imgs: imgs, cniConfDir: kn.confDir, nodeIP: nodeIP, crun: env.kubeletCrun}
		env.targets = append(env.targets, t)
		if out, err := exec.Command(filepath.Join(cluster.BinDir(), "kubelet"), "--version").Output(); err == nil {
			env.kubeletVersion = strings.TrimSpace(string(out))
		}
	}
	for _, t := range env.targets {
		if err := createNamespace(ctx, cluster, t.ns); err != nil {
			return nil, err
		}
	}
	// Runs first: the nodes themselves take down what a failed measurement
	// left, so sandboxes, IPs and volumes are released the normal way.
	cl.add("delete leftover pods", func() error { return deleteLeftovers(cluster, env.targets) })
	return env, nil
}

// startKubeletNode starts the kubelet's CRI containerd with the images
// imported (crun its default runtime if crun is set), then the kubelet,
// and registers their stopping in cl.
func startKubeletNode(ctx context.Context, cluster *harness.Cluster, imgs *benchImages, cniConfDir, nodeIP string, maxPods int, crun string, cl *cleanups) (target, error) {
	kdir := filepath.Join(cluster.Dir(), "bench-kubelet")
	cri, err := startCRIContainerd(ctx, filepath.Join(kdir, "containerd"), cluster.BinDir(),
		kubeletCRI(harness.CRIConfig{SandboxImage: pauseRef, CNIBinDir: cluster.CNIBinDir(), CNIConfDir: cniConfDir}, kdir, crun))
	if err != nil {
		return target{}, err
	}
	cl.add("stop the CRI containerd and its containers", func() error { cri.stop(); return nil })
	for _, a := range append([]string{imgs.pause}, imgs.test...) {
		if err := cri.importImage(ctx, a); err != nil {
			return target{}, err
		}
	}
	k, err := startKubelet(ctx, cluster, kdir, kubeletNode, nodeIP, cgroupRoot, maxPods, cri)
	if err != nil {
		return target{}, err
	}
	cl.add("stop the kubelet", func() error { k.stop(); return nil })
	return target{node: kubeletNode, label: "kubelet", ns: "bench-kubelet", agentPid: k.p.Pid(),
		runtimePid: cri.p.Pid(), socket: cri.socket(), cri: cri, rootDir: k.root}, nil
}

// kubeletCRI is a kubelet's CRI config with crun (its binary, if not
// empty) as the default runtime, its state under dir.
func kubeletCRI(cri harness.CRIConfig, dir, crun string) harness.CRIConfig {
	if crun != "" {
		return cri.WithCrun(crun, filepath.Join(dir, "crun-root"))
	}
	return cri
}

// setPodCIDR gives the node its pod CIDR as the controller-manager's node
// IPAM would (the harness's runs without it), once the node is registered.
func setPodCIDR(ctx context.Context, cluster *harness.Cluster, node, cidr string) error {
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr)
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client().CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		return err == nil, nil // the node registers first
	})
}

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
)

// -full -node-kind kubelet: the same two-node cluster as startFullCluster
// with the upstream kubelet (the suite's release) in hostlet's place on
// both nodes, so a test that fails on both is this environment's. Each
// kubelet has a CRI containerd of its own in its node's namespaces (the
// cluster's node, Host "b"), with flannel's config and plugin dirs as its
// CNI's; the addons are the same.

// fullKubeletNodes are the kubelet nodes' names; the second runs on Host "b".
var fullKubeletNodes = [2]string{"kubelet-a", "kubelet-b"}

// startFullKubeletCluster starts the two-node cluster with kubelet nodes.
func startFullKubeletCluster(ctx context.Context, c config, imgs []builtImage) (*testEnv, error) {
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
	var archives []string
	for _, img := range imgs {
		archives = append(archives, img.archive)
	}
	for i, name := range fullKubeletNodes {
		o := harness.KubeletOptions{NodeName: name, SandboxImage: pauseRef(imgs), Images: archives,
			ClusterDNS: harness.ClusterDNS, ClusterDomain: harness.ClusterDomain,
			CNIConfDir: shared.Conf, ExtraCNIBinDirs: []string{shared.Bin}, NoWaitReady: true}
		if i == 1 {
			o.Host = host
		}
		k, err := cl.StartKubelet(ctx, o)
		if err != nil {
			return fail(fmt.Errorf("kubelet %s: %w (logs: %s)", name, err, cl.LogDir()))
		}
		env.kubelets = append(env.kubelets, k)
	}
	logf("imported %d images into both kubelets' CRI containerd", len(imgs))
	for _, k := range env.kubelets {
		name := k.NodeName()
		if _, err := cl.WaitForNode(ctx, name, 2*time.Minute, func(n *v1.Node) (bool, error) {
			return len(n.Spec.PodCIDRs) == 1, nil
		}); err != nil {
			return fail(k.Process().Failure(fmt.Errorf("node %s with a pod CIDR: %w", name, err)))
		}
	}
	imports := func(ctx context.Context, archive string) error {
		for _, k := range env.kubelets {
			if err := k.ImportImage(ctx, archive); err != nil {
				return err
			}
		}
		return nil
	}
	if err := deployFullAddons(ctx, c, cl, host, shared, imports, fullKubeletNodes[:]); err != nil {
		return fail(err)
	}
	return env, nil
}

// deployFullAddons deploys kube-proxy, flannel (over dirs shared) and
// CoreDNS on the cluster of nodes (the second on host), importing their
// images with imports, and waits until the nodes are Ready and the addons
// answer. It is startFullCluster's second half.
func deployFullAddons(ctx context.Context, c config, cl *harness.Cluster, host *harness.Host, shared harness.FlannelDirs,
	imports func(context.Context, string) error, nodes []string) error {
	t0 := time.Now()
	addons := harness.AddonImages{ImageDir: filepath.Join(c.cache, "images"), Import: imports}
	if err := cl.DeployKubeProxy(ctx, addons); err != nil {
		return err
	}
	// Both nodes' flanneld use their address on the link between them.
	prefix := strings.TrimSuffix(host.LinkSubnet(), "0/24")
	if err := cl.DeployFlannel(ctx, addons, shared, fullNodeCIDRMask, "--iface-regex=^"+strings.ReplaceAll(prefix, ".", `\.`)); err != nil {
		return err
	}
	for _, name := range nodes {
		if err := cl.WaitNodeReady(ctx, name); err != nil {
			pods, _ := cl.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
			return fmt.Errorf("node %s Ready after flannel's conflist: %w\n%s", name, err, pods)
		}
	}
	if err := cl.DeployCoreDNS(ctx, addons); err != nil {
		return err
	}
	for _, ip := range []string{cl.NodeIP(), host.IP()} {
		if err := cl.WaitKubeProxy(ctx, ip); err != nil {
			return err
		}
	}
	if err := cl.WaitCoreDNS(ctx); err != nil {
		return err
	}
	logf("kube-proxy, flannel and CoreDNS up in %v", time.Since(t0).Round(time.Second))
	logf("cluster up: nodes %s Ready, kubeconfig %s", strings.Join(nodes, ", "), cl.KubeconfigPath())
	return nil
}

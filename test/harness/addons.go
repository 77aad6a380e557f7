package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hostlet/hostlet/test/images"
)

// ClusterDNS is the kube-dns Service's address (in the harness's
// 10.96.0.0/16 service range) that DeployNetworkAddons gives CoreDNS; nodes
// get it with --cluster-dns.
const ClusterDNS = "10.96.0.10"

// ClusterDomain is the cluster domain CoreDNS serves.
const ClusterDomain = "cluster.local"

// AddonImages says where the images of add-ons (DeployNetworkAddons,
// DeployComponent) are built and how they reach the node's runtime.
type AddonImages struct {
	// ImageDir caches the built images (~/.cache/hostlet/images).
	ImageDir string
	// Import puts an image archive into the node's runtime (the cluster's
	// containerd for hostlet, Kubelet.ImportImage for the kubelet).
	Import func(ctx context.Context, archive string) error
}

// DeployNetworkAddons builds kube-proxy and CoreDNS (test/cluster/build.sh,
// on request) and their images, imports them with a.Import, deploys them
// from test/e2e/testdata (kube-proxy.yaml: a DaemonSet on the own-netns
// nodes; coredns.yaml: a Deployment behind ClusterDNS) and waits until
// kube-proxy's healthz on the node says its rules are synced and CoreDNS is
// rolled out. The cluster needs Options.NodeNetns and a Ready node.
func (c *Cluster) DeployNetworkAddons(ctx context.Context, a AddonImages) error {
	if err := c.DeployKubeProxy(ctx, a); err != nil {
		return err
	}
	if err := c.DeployCoreDNS(ctx, a); err != nil {
		return err
	}
	if err := c.WaitKubeProxy(ctx, c.NodeIP()); err != nil {
		return err
	}
	return c.WaitCoreDNS(ctx)
}

// DeployKubeProxy builds kube-proxy and its image, imports it with a.Import
// and applies test/e2e/testdata/kube-proxy.yaml (a DaemonSet on the
// own-netns nodes); WaitKubeProxy waits for a node's. The cluster needs
// Options.NodeNetns.
func (c *Cluster) DeployKubeProxy(ctx context.Context, a AddonImages) error {
	if c.net == nil {
		return fmt.Errorf("kube-proxy needs a node in its own network namespace (Options.NodeNetns)")
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return c.DeployComponent(ctx, a, "kube-proxy", images.BuildKubeProxy, filepath.Join(root, "test", "e2e", "testdata", "kube-proxy.yaml"), map[string]string{
		"APISERVER": c.APIServerURL(), "CLUSTER_CIDR": c.PodSubnet(), "NODE_LABEL": NodeNetnsLabel,
	})
}

// DeployCoreDNS builds CoreDNS and its image, imports it with a.Import and
// applies test/e2e/testdata/coredns.yaml (a Deployment behind ClusterDNS);
// WaitCoreDNS waits for its rollout.
func (c *Cluster) DeployCoreDNS(ctx context.Context, a AddonImages) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return c.DeployComponent(ctx, a, "coredns", images.BuildCoreDNS, filepath.Join(root, "test", "e2e", "testdata", "coredns.yaml"), map[string]string{
		"DOMAIN": ClusterDomain, "DNS_IP": ClusterDNS,
	})
}

// WaitKubeProxy waits until kube-proxy's healthz on the node at nodeIP says
// its rules are synced.
func (c *Cluster) WaitKubeProxy(ctx context.Context, nodeIP string) error {
	url := "http://" + net.JoinHostPort(nodeIP, "10256") + "/healthz"
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		logs, _ := c.Kubectl(ctx, "logs", "-n", "kube-system", "ds/kube-proxy", "--tail", "40")
		return fmt.Errorf("kube-proxy healthz on %s (%s): %w\n%s", nodeIP, last, err, logs)
	}
	return nil
}

// WaitCoreDNS waits until CoreDNS's Deployment is rolled out.
func (c *Cluster) WaitCoreDNS(ctx context.Context) error {
	if out, err := c.Kubectl(ctx, "rollout", "status", "-n", "kube-system", "deployment/coredns", "--timeout=3m"); err != nil {
		logs, _ := c.Kubectl(ctx, "logs", "-n", "kube-system", "deployment/coredns", "--tail", "40")
		return fmt.Errorf("coredns: %w\n%s\n%s", err, out, logs)
	}
	return nil
}

// DeployComponent builds test/cluster component name (build.sh <name>)
// and its image with build, imports it with a.Import and applies manifest
// with its ${KEY}s filled from vars and the image's reference as IMAGE.
func (c *Cluster) DeployComponent(ctx context.Context, a AddonImages, name string,
	build func(ctx context.Context, outDir, bin string) (images.Image, error), manifest string, vars map[string]string) error {
	bin, err := BuildComponent(ctx, c.logf, name)
	if err != nil {
		return err
	}
	img, err := build(ctx, a.ImageDir, bin)
	if err != nil {
		return fmt.Errorf("%s image: %w", name, err)
	}
	if err := a.Import(ctx, img.Archive); err != nil {
		return err
	}
	vars["IMAGE"] = img.Ref
	b, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	var pairs []string
	for k, v := range vars {
		pairs = append(pairs, "${"+k+"}", v)
	}
	out := strings.NewReplacer(pairs...).Replace(string(b))
	if i := strings.Index(out, "${"); i >= 0 {
		return fmt.Errorf("%s: no value for %.20s", manifest, out[i:])
	}
	f := filepath.Join(c.dir, "addon-"+filepath.Base(manifest))
	if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
		return err
	}
	if o, err := c.Kubectl(ctx, "apply", "-f", f); err != nil {
		return fmt.Errorf("%w\n%s", err, o)
	}
	return nil
}

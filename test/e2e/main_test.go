// Package e2e tests hostlet against the real thing: a kube-apiserver with
// etcd, scheduler and controller-manager, containerd with runc, CNI, and
// locally built images. One cluster serves the whole run; each test works
// in its own namespace.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
)

const nodeName = "hostlet-e2e"

var (
	cluster *harness.Cluster
	node    *harness.Hostlet
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() || os.Geteuid() != 0 {
		fmt.Println("e2e: skipped (needs root and not -short)")
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	logf := func(f string, a ...any) { fmt.Printf("e2e: "+f+"\n", a...) }
	cache := os.Getenv("HOSTLET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "hostlet")
	}
	imgs, err := images.BuildAll(ctx, filepath.Join(cache, "images"))
	if err != nil {
		logf("building images: %v", err)
		return 1
	}
	bin, err := harness.BuildHostlet(ctx)
	if err != nil {
		logf("building hostlet: %v", err)
		return 1
	}
	cluster, err = harness.Start(ctx, harness.Options{Logf: logf, KeepDir: os.Getenv("E2E_KEEP") != ""})
	if err != nil {
		logf("starting cluster: %v", err)
		return 1
	}
	defer cluster.Stop()
	logf("cluster up in %s under %s", cluster.StartDuration.Round(time.Millisecond), cluster.Dir())
	// Which control plane answered matters once make compat swaps it.
	if v, err := cluster.Client().Discovery().ServerVersion(); err == nil {
		logf("control plane %s", v.GitVersion)
	}
	for _, img := range imgs {
		if err := cluster.ImportImage(ctx, img.Archive); err != nil {
			logf("importing %s: %v", img.Ref, err)
			return 1
		}
	}
	// The kubelet's beta gates for projected clusterTrustBundle (and the
	// one it depends on) and podCertificate sources, off by default
	// (TestPodFieldsClusterTrustBundle, TestPodFieldsPodCertificate).
	node, err = cluster.StartHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: nodeName,
		ExtraArgs: []string{"--feature-gates", "ClusterTrustBundle=true,ClusterTrustBundleProjection=true,PodCertificateRequest=true"}})
	if err != nil {
		logf("starting hostlet: %v", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		logf("hostlet log: %s", node.LogPath())
		if b, err := os.ReadFile(node.LogPath()); err == nil {
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			fmt.Printf("---- hostlet log tail ----\n%s\n", b)
		}
	}
	return code
}

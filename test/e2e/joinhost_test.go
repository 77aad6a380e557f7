package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A second machine beside the cluster's node (a Host: its own network and
// mount namespaces and containerd) joins as a user joins it: `hostlet join`
// with the chart's bootstrap token, run on that machine, then hostlet from
// the files join wrote. The Node's InternalIP is the host's, it carries the
// own-netns label the network DaemonSets select, hostlet's healthz answers
// on the host's address, and a pod bound to the node runs to completion in
// the host's containerd (the only one holding the image is the host's: the
// cluster's node has none imported).
func TestJoinOnSecondHost(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-joined-b"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	host, err := c.AddHost(ctx, "b", harness.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop) // before the cluster's
	imgs, err := images.BuildAll(ctx, filepath.Join(imageCache(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if err := host.ImportImage(ctx, img.Archive); err != nil {
			t.Fatal(err)
		}
	}

	helm, err := harness.BuildHelm(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	notes, err := c.Helm(ctx, helm, "install", "hostlet", filepath.Join(root, "charts", "hostlet"), "--namespace", "kube-system",
		"--set", "clusterInfo.server="+c.APIServerURL(), "--set", "clusterDNS.publish=false")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`hostlet join (https://\S+) --token (\S+) --discovery-token-ca-cert-hash`).FindStringSubmatch(notes)
	if m == nil {
		t.Fatalf("NOTES print no join command:\n%s", notes)
	}
	bin := hostletBinary(t)
	state := filepath.Join(t.TempDir(), "state")
	args := append([]string{"join", m[1], "--token", m[2], "--discovery-token-ca-cert-hash", caHashOf(t, c.CACertFile()),
		"--tls-bootstrap-timeout", "2m", "--ignore-preflight-errors", "KubeletNotRunning"}, host.JoinArgs(state, name)...)
	if out, err := c.JoinCommand(ctx, host, bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("hostlet join on host b: %v\n%s", err, out)
	}
	h, err := c.StartJoinedHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: name, Host: host}, filepath.Join(state, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	node, err := c.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal string
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != host.IP() || node.Labels[harness.NodeNetnsLabel] != "true" {
		t.Fatalf("joined node: InternalIP %q (want the host's %s), labels %v", internal, host.IP(), node.Labels)
	}
	resp, err := http.Get(h.HealthzURL())
	if err != nil {
		t.Fatalf("healthz on the host's address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the host's address: %s", resp.Status)
	}

	ns := c.NewNamespace(t)
	pod := busybox(ns, "on-host-b", "true")
	pod.Spec.NodeName = name
	c.CreatePod(t, pod)
	if _, err := c.WaitForPod(ctx, ns, pod.Name, 2*time.Minute, harness.PodSucceeded); err != nil {
		t.Fatalf("pod on the joined host: %v", err)
	}
}

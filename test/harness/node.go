package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

func (c *Cluster) nodeDir(nodeName string) string {
	return filepath.Join(c.dir, "pki", "nodes", nodeName)
}

// NodeKubeconfig writes (once per node) a kubeconfig whose client cert is
// CN=system:node:<name>, O=system:nodes, signed by the cluster CA: the
// identity the Node authorizer and NodeRestriction admission recognise.
func (c *Cluster) NodeKubeconfig(nodeName string) (string, error) {
	dir := c.nodeDir(nodeName)
	path := filepath.Join(dir, "kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	cert, key, err := c.pki.issue(certSpec{
		cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}, client: true,
	})
	if err != nil {
		return "", err
	}
	if err := writeKubeconfig(path, c.APIServerURL(), "system:node:"+nodeName, c.pki.caPEM, cert, key); err != nil {
		return "", err
	}
	return path, nil
}

// KubeletServingCert writes (once per node) the node's HTTPS serving cert,
// signed by the cluster CA (which the apiserver trusts for logs/exec), with
// SANs NodeIP and nodeName.
func (c *Cluster) KubeletServingCert(nodeName string) (certFile, keyFile string, err error) {
	dir := c.nodeDir(nodeName)
	certFile, keyFile = filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	if _, err := os.Stat(keyFile); err == nil {
		return certFile, keyFile, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	cert, key, err := c.pki.issue(certSpec{
		cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}, server: true,
		ips: []net.IP{net.ParseIP(c.NodeIP())}, dns: []string{nodeName},
	})
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(certFile, cert, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WaitNodeReady watches Node name until its Ready condition is True.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string) error {
	_, err := c.WaitForNode(ctx, name, 2*time.Minute, NodeReady)
	return err
}

// NodeReady is true when the node's Ready condition is True.
func NodeReady(n *v1.Node) (bool, error) {
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue, nil
		}
	}
	return false, nil
}

// WaitForNode watches Node name until cond holds (nil error), cond fails,
// or timeout/ctx expires. The node need not exist yet.
func (c *Cluster) WaitForNode(ctx context.Context, name string, timeout time.Duration, cond func(*v1.Node) (bool, error)) (*v1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	var last *v1.Node
	ev, err := watchtools.UntilWithSync(ctx, lw, &v1.Node{}, nil, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*v1.Node)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = n
		return cond(n)
	})
	if err != nil {
		if last != nil {
			return last, fmt.Errorf("node %s: %w; conditions: %v", name, err, last.Status.Conditions)
		}
		return nil, fmt.Errorf("node %s: %w (never seen)", name, err)
	}
	return ev.Object.(*v1.Node), nil
}

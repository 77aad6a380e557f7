package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/hostlet/hostlet/test/harness"
)

// kubeletNode is the upstream kubelet running as a node.
type kubeletProc struct {
	p    *harness.Process
	root string
}

// startKubelet runs the kubelet from binDir as node name with node IP
// nodeIP and capacity for maxPods pods, its state under dir, against the
// CRI containerd, and waits until the node is Ready.
func startKubelet(ctx context.Context, c *harness.Cluster, dir, name, nodeIP, cgroupRoot string, maxPods int, cri *criRuntime) (*kubeletProc, error) {
	k := &kubeletProc{root: filepath.Join(dir, "root")}
	for _, d := range []string{k.root, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	kubeconfig, err := c.NodeKubeconfig(name)
	if err != nil {
		return nil, err
	}
	cert, key, err := c.KubeletServingCert(name)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// The API on 127.0.0.1, the node's address aside: nothing but the
	// API server talks to it.
	cfg := harness.KubeletConfigYAML(harness.KubeletConfig{
		Address: "127.0.0.1", Port: port, CertFile: cert, KeyFile: key, ClientCA: c.CACertFile(),
		CgroupRoot: cgroupRoot, CRISocket: cri.socket(), MaxPods: maxPods,
		PodLogsDir: filepath.Join(dir, "pod-logs"), VolumePluginDir: filepath.Join(dir, "volume-plugins"),
	})
	cfgPath := filepath.Join(dir, "kubelet-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "PATH="+c.BinDir()+":"+os.Getenv("PATH"))
	k.p, err = harness.StartProcess("kubelet", filepath.Join(dir, "kubelet.log"), env, filepath.Join(c.BinDir(), "kubelet"),
		"--config", cfgPath,
		"--kubeconfig", kubeconfig,
		"--hostname-override", name,
		"--node-ip", nodeIP,
		"--root-dir", k.root,
		"--cert-dir", filepath.Join(k.root, "pki"))
	if err != nil {
		return nil, err
	}
	if err := c.WaitProcessNodeReady(ctx, k.p, name); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

func (k *kubeletProc) stop() { k.p.Stop(15 * time.Second) }

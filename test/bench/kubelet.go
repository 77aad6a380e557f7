package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hostlet/hostlet/test/harness"
)

// kubeletConfig is the upstream kubelet's KubeletConfiguration: cgroupfs on
// this cgroup v1 host, the same authn/authz a real node has (x509 client CA
// and webhooks), a serving cert from the harness CA, and everything that
// would otherwise act on the shared machine switched off or made lenient
// (no eviction or image GC in a short run, no iptables chains, no healthz
// port on a fixed number, pod logs and plugins under the run's dir).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %[1]d
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %[2]q
tlsPrivateKeyFile: %[3]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[4]q
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %[5]q
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[6]s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
makeIPTablesUtilChains: false
oomScoreAdj: 0
podLogsDir: %[7]q
volumePluginDir: %[8]q
`

// kubeletNode is the upstream kubelet running as a node.
type kubeletProc struct {
	p    *harness.Process
	root string
}

// startKubelet runs the kubelet from binDir as node name with node IP
// nodeIP, its state under dir, against the CRI containerd, and waits until
// the node is Ready.
func startKubelet(ctx context.Context, c *harness.Cluster, dir, name, nodeIP, cgroupRoot string, cri *criRuntime) (*kubeletProc, error) {
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
	cfg := fmt.Sprintf(kubeletConfig, port, cert, key, c.CACertFile(), cgroupRoot, cri.socket(),
		filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"))
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
	if err := waitNodeReady(ctx, c, k.p, name); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

func (k *kubeletProc) stop() { k.p.Stop(15 * time.Second) }

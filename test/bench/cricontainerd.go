package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	log "github.com/sirupsen/logrus"

	"github.com/hostlet/hostlet/test/harness"
)

// criNamespace is where containerd's CRI plugin keeps the kubelet's images
// and containers.
const criNamespace = "k8s.io"

// criRuntime is the kubelet's containerd: the harness's private containerd
// config with the CRI plugin on.
type criRuntime struct {
	dir    string
	p      *harness.Process
	client *containerd.Client
}

func (r *criRuntime) socket() string { return harness.ContainerdSocketIn(r.dir) }

// hostsDir is its registry hosts directory (the CRI plugin's config_path).
func (r *criRuntime) hostsDir() string { return filepath.Join(r.dir, "certs.d") }

// startCRIContainerd starts the CRI containerd under dir with binaries (and,
// through PATH, the shim and runc) from binDir, and waits until it answers.
func startCRIContainerd(ctx context.Context, dir, binDir string, cri harness.CRIConfig) (*criRuntime, error) {
	r := &criRuntime{dir: dir}
	cfgPath, err := harness.WriteContainerdConfig(dir, &cri)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	if r.p, err = harness.StartProcess("cri-containerd", filepath.Join(dir, "containerd.log"), env,
		filepath.Join(binDir, "containerd"), "--config", cfgPath); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = r.p.WaitFor(ctx, "its socket", 100*time.Millisecond, func(ctx context.Context) (err error) {
		r.client, err = harness.DialContainerd(ctx, r.socket(), criNamespace)
		return err
	})
	if err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// importImage imports an OCI archive into the CRI namespace and unpacks it,
// so the kubelet finds the same images hostlet has, already present.
func (r *criRuntime) importImage(ctx context.Context, archive string) error {
	_, err := harness.ImportArchive(ctx, r.client, criNamespace, archive)
	return err
}

// stop kills and deletes whatever containers are left (the kubelet is gone
// by then), so the shims exit and unmount cleanly, then stops the daemon.
// The harness's sweep of the cluster dir catches anything that survives.
func (r *criRuntime) stop() {
	if r.client != nil {
		harness.RemoveAllContainers(context.Background(), r.client, log.Warnf)
		r.client.Close()
	}
	r.p.Stop(10 * time.Second)
}

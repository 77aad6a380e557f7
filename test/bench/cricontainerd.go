package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
)

// criNamespace is where containerd's CRI plugin keeps the kubelet's images
// and containers.
const criNamespace = "k8s.io"

// criConfig is a second private containerd, this one WITH the CRI plugin, for
// the upstream kubelet: own root, state and sockets; cgroupfs; oom_score_adj
// clamped (CAP_SYS_RESOURCE is missing here, so a negative one makes runc
// fail); the locally imported pause image as sandbox image; its own CNI
// config; network namespaces mounted under its state dir (not the
// host-global /var/run/netns) so a crashed run's leftovers are swept with
// the cluster dir. NRI (a host-global socket) is off; /opt and the registry
// config point into the run's dir.
const criConfig = `version = 3
root = %[1]q
state = %[2]q
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "%[4]s/opt"

[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "%[4]s/image-verifier"

[plugins."io.containerd.transfer.v1.local"]
  config_path = "%[4]s/certs.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[5]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "%[4]s/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[6]q]
    conf_dir = %[7]q
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    SystemdCgroup = false
`

// criRuntime is the kubelet's containerd.
type criRuntime struct {
	dir    string
	d      *daemon
	client *containerd.Client
}

func (r *criRuntime) socket() string { return filepath.Join(r.dir, "containerd.sock") }

// startCRIContainerd starts the CRI containerd under dir with binaries (and,
// through PATH, the shim and runc) from binDir, and waits until it answers.
func startCRIContainerd(dir, binDir, sandboxImage, cniBinDir, cniConfDir string) (*criRuntime, error) {
	r := &criRuntime{dir: dir}
	for _, sub := range []string{"root", "state", "opt", "certs.d", "image-verifier"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	cfg := fmt.Sprintf(criConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), r.socket(), dir,
		sandboxImage, cniBinDir, cniConfDir)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	var err error
	if r.d, err = startDaemon("cri-containerd", filepath.Join(dir, "containerd.log"), env,
		filepath.Join(binDir, "containerd"), "--config", cfgPath); err != nil {
		return nil, err
	}
	err = r.d.waitFor("its socket", time.Minute, 100*time.Millisecond, func() error {
		cl, err := containerd.New(r.socket(), containerd.WithDefaultNamespace(criNamespace),
			containerd.WithTimeout(2*time.Second))
		if err != nil {
			return err
		}
		if _, err := cl.Version(context.Background()); err != nil {
			cl.Close()
			return err
		}
		r.client = cl
		return nil
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
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx = namespaces.WithNamespace(ctx, criNamespace)
	imgs, err := r.client.Import(ctx, f)
	if err != nil {
		return fmt.Errorf("import %s: %w", archive, err)
	}
	for _, img := range imgs {
		if err := containerd.NewImageWithPlatform(r.client, img, platforms.DefaultStrict()).Unpack(ctx, "overlayfs"); err != nil {
			return fmt.Errorf("unpack %s: %w", img.Name, err)
		}
	}
	return nil
}

// stop kills and deletes whatever containers are left (the kubelet is gone
// by then), so the shims exit and unmount cleanly, then stops the daemon.
// The harness's sweep of the cluster dir catches anything that survives.
func (r *criRuntime) stop() {
	if r.client != nil {
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), criNamespace), 30*time.Second)
		if ctrs, err := r.client.Containers(ctx); err == nil {
			for _, c := range ctrs {
				if t, err := c.Task(ctx, nil); err == nil {
					_ = t.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll)
					_, _ = t.Delete(ctx, containerd.WithProcessKill)
				}
				_ = c.Delete(ctx, containerd.WithSnapshotCleanup)
			}
		}
		cancel()
		r.client.Close()
	}
	r.d.stop(10 * time.Second)
}

package join

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/hostlet/hostlet/stargz"
)

// Lazy pulls (join --image-snapshotter=stargz): join writes and starts a
// unit of its own for `hostlet stargz-snapshotter` (its FUSE mounts are
// the containers' root filesystems, so it is not restarted with hostlet,
// nor by a rerun of join), sets hostlet's --image-snapshotter, and checks
// that containerd has the snapshotter as its proxy plugin: containerd's
// config is the host's, so join says what to add rather than edit it.

const stargzUnitName = "hostlet-stargz-snapshotter.service"

func (l Layout) StargzUnitFile() string { return filepath.Join(l.UnitDir, stargzUnitName) }

// stargzUnitFile runs the snapshotter, resolving registries as hostlet
// does (registryDir: hostlet's --registry-config-dir, if set). It starts
// before containerd, whose proxy plugin dials it, and stops after it.
func stargzUnitFile(l Layout, executable, registryDir string) file {
	args := ""
	if registryDir != "" {
		args = " --registry-config-dir " + registryDir
	}
	unit := fmt.Sprintf(`# Written by hostlet join; hostlet leave removes it.
[Unit]
Description=hostlet stargz-snapshotter: lazy image pulls (containerd's proxy snapshotter %q)
Documentation=https://github.com/hostlet/hostlet
Before=containerd.service hostlet.service

[Service]
ExecStart=%s stargz-snapshotter%s
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
`, stargz.Name, executable, args)
	return file{path: l.StargzUnitFile(), mode: 0o644, data: []byte(unit)}
}

// checkStargz wants containerd to list the proxy snapshotter, when asked
// for lazy pulls.
func checkStargz(ctx context.Context, cfg PreflightConfig) (string, error) {
	if cfg.ImageSnapshotter == "" {
		return "", nil
	}
	if cfg.ImageSnapshotter != stargz.Name {
		return "", fmt.Errorf("--image-snapshotter %q: only %q is known", cfg.ImageSnapshotter, stargz.Name)
	}
	addr := strings.TrimPrefix(cfg.RuntimeEndpoint, "unix://")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err := containerd.New(addr, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return "", fmt.Errorf("containerd at %s does not answer: %w", addr, err)
	}
	defer client.Close()
	resp, err := client.IntrospectionService().Plugins(ctx, "type==io.containerd.snapshotter.v1,id=="+stargz.Name)
	if err != nil {
		return "", fmt.Errorf("asking containerd for its snapshotters: %w", err)
	}
	if len(resp.Plugins) == 0 {
		return "", errors.New("containerd has no snapshotter " + stargz.Name + ": add to its config (/etc/containerd/config.toml) and restart it:\n" + stargz.ProxyPluginConfig(stargz.DefaultAddress, stargz.DefaultRoot))
	}
	return "", nil
}

// stopStargz stops and disables the snapshotter's unit if join wrote one.
func stopStargz(l Layout) error {
	if _, err := os.Stat(l.StargzUnitFile()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := systemctl("disable", "--now", stargzUnitName); err != nil {
		return err
	}
	return os.Remove(l.StargzUnitFile())
}

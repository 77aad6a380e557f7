package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// startEtcd runs a single-member etcd on loopback. Plain HTTP: it is only
// reachable from this host and only the apiserver talks to it.
func (c *Cluster) startEtcd() (*process, error) {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	return c.launch("etcd", filepath.Join(c.binDir, "etcd"),
		"--name", "harness",
		"--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "harness="+peer,
		"--initial-cluster-state", "new",
		// Test data is disposable: skipping fsync makes writes (and so the
		// whole control plane) much faster on a shared disk.
		"--unsafe-no-fsync",
		"--log-level", "warn",
	)
}

// waitEtcd waits until etcd reports itself healthy.
func (c *Cluster) waitEtcd(ctx context.Context, p *process) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/health", c.ports.etcdClient)
	hc := &http.Client{Timeout: 2 * time.Second}
	return p.waitFor(ctx, "etcd /health", 50*time.Millisecond, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"health":"true"`) {
			return fmt.Errorf("unhealthy: %s", b)
		}
		return nil
	})
}

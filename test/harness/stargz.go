package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// proxyPlugins is containerd's proxy_plugins section for snapshotters
// (name: socket), "" for none.
func proxyPlugins(snapshotters map[string]string) string {
	names := make([]string, 0, len(snapshotters))
	for n := range snapshotters {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "\n[proxy_plugins.%q]\n  type = \"snapshot\"\n  address = %q\n", n, snapshotters[n])
		// A StargzSnapshotter's root, beside its socket, exported as
		// stargz.ProxyPluginConfig does.
		if root := filepath.Join(filepath.Dir(snapshotters[n]), "root"); isDir(root) {
			fmt.Fprintf(&b, "  exports = { root = %q }\n", root)
		}
	}
	return b.String()
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// StargzSnapshotter is a `hostlet stargz-snapshotter` process of a cluster
// (AddStargzSnapshotter), for a containerd made with
// AddContainerdWithSnapshotters(..., {"stargz": s.Socket()}).
type StargzSnapshotter struct {
	c    *Cluster
	name string
	dir  string
	bin  string
	argv []string
	proc *process
}

// AddStargzSnapshotter starts `<hostletBin> stargz-snapshotter` with its
// root and sockets under the cluster's dir, resolving registries through
// the cluster's ContainerdHostsDir, plus args; it waits for its sockets.
// Stop (or the cluster's Stop, which unmounts whatever is under its dir)
// takes it down.
func (c *Cluster) AddStargzSnapshotter(ctx context.Context, name, hostletBin string, args ...string) (*StargzSnapshotter, error) {
	s := &StargzSnapshotter{c: c, name: name, dir: filepath.Join(c.dir, "stargz-"+name)}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	s.bin, s.argv = c.net.command(hostletBin, append([]string{"stargz-snapshotter",
		"--root", s.Root(), "--address", s.Socket(),
		"--credentials-socket", s.CredentialsSocket(),
		"--registry-config-dir", c.ContainerdHostsDir()}, args...)...)
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Restart stops the process (it unmounts its snapshots) and starts it
// again with the same flags and root: it remounts the snapshots it had.
func (s *StargzSnapshotter) Restart(ctx context.Context) error {
	s.Stop()
	return s.restartAfterStop(ctx)
}

func (s *StargzSnapshotter) restartAfterStop(ctx context.Context) error {
	// A killed process leaves its sockets: the start waits for new ones.
	for _, p := range []string{s.Socket(), s.CredentialsSocket()} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return s.start(ctx)
}

// Crash kills the process (SIGKILL: nothing unmounted, nothing cleaned
// up, as after an OOM kill) and starts it again with the same flags and
// root.
func (s *StargzSnapshotter) Crash(ctx context.Context) error {
	s.proc.kill()
	return s.restartAfterStop(ctx)
}

// LogPath is the process's log.
func (s *StargzSnapshotter) LogPath() string { return s.c.logPath("stargz-" + s.name) }

func (s *StargzSnapshotter) start(ctx context.Context) error {
	var err error
	if s.proc, err = startProcess("stargz-"+s.name, s.LogPath(), os.Environ(), true, s.bin, s.argv...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = s.proc.waitFor(ctx, "stargz snapshotter "+s.name, 50*time.Millisecond, func(context.Context) error {
		for _, p := range []string{s.Socket(), s.CredentialsSocket()} {
			if _, err := os.Stat(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.Stop()
	}
	return err
}

// Root is the snapshotter's state: snapshots under snapshotter/, layer
// caches under stargz/.
func (s *StargzSnapshotter) Root() string { return filepath.Join(s.dir, "root") }

// Socket is the snapshots API's socket (containerd's proxy plugin address).
func (s *StargzSnapshotter) Socket() string { return filepath.Join(s.dir, "stargz.sock") }

// CredentialsSocket is where a hostlet hands over pull credentials
// (--stargz-credentials-socket).
func (s *StargzSnapshotter) CredentialsSocket() string { return filepath.Join(s.dir, "creds.sock") }

// Stop stops the process (SIGTERM: it unmounts its snapshots) and unmounts
// whatever it left. Stop the containerd using it first.
func (s *StargzSnapshotter) Stop() {
	s.proc.stop(10 * time.Second)
	if err := unmountUnder(s.dir); err != nil {
		s.c.logf("harness: stargz snapshotter: %v", err)
	}
}

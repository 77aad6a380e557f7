// Package stargz is `hostlet stargz-snapshotter`: containerd's stargz
// snapshotter (github.com/containerd/stargz-snapshotter) as a proxy
// snapshotter plugin of containerd, built from its library packages, which
// mounts eStargz images from their registry and fetches their files on
// demand (lazy pulls). It runs as a process of its own because its FUSE
// mounts are the running containers' root filesystems: they must outlive a
// restart of hostlet. Beside the snapshots API it serves the credentials
// socket hostlet hands each pull's registry credentials to.
package stargz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/containerd/v2/pkg/reference"
	clog "github.com/containerd/log"
	stargzfs "github.com/containerd/stargz-snapshotter/fs"
	memorymetadata "github.com/containerd/stargz-snapshotter/metadata/memory"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

// Name is the snapshotter's name in containerd's proxy_plugins, which
// hostlet's --image-snapshotter names.
const Name = "stargz"

// Where `hostlet stargz-snapshotter` keeps its state and listens by
// default, and so where containerd's proxy plugin and hostlet's
// --stargz-credentials-socket look.
const (
	DefaultRoot              = "/var/lib/hostlet-stargz"
	DefaultAddress           = "/run/hostlet-stargz/stargz.sock"
	DefaultCredentialsSocket = "/run/hostlet-stargz/credentials.sock"
)

// ProxyPluginConfig is the section of containerd's config.toml that makes
// the snapshotter at address, keeping its state under root, containerd's
// proxy snapshotter Name. The root is exported as a built-in snapshotter
// exports its own: containerd's CRI reports the image filesystem of its
// snapshotter there, and hostlet's imagefs follows it likewise.
func ProxyPluginConfig(address, root string) string {
	return fmt.Sprintf("[proxy_plugins.%s]\n  type = \"snapshot\"\n  address = %q\n  exports = { root = %q }\n", Name, address, root)
}

// Config of the snapshotter process.
type Config struct {
	// Root holds the snapshots, the layer cache and the FUSE mounts.
	Root string
	// Address is the unix socket of the snapshots gRPC API containerd's
	// proxy plugin dials.
	Address string
	// CredentialsSocket is where hostlet hands over pull credentials.
	CredentialsSocket string
	// RegistryConfigDir holds containerd-style hosts.toml files per registry
	// (hostlet's --registry-config-dir), so layers are fetched from the hosts
	// hostlet's pull resolved the image at.
	RegistryConfigDir string
	// NoBackgroundFetch leaves a layer's files not yet read in the registry
	// (by default they are fetched in the background once it is mounted).
	NoBackgroundFetch bool
	// CredentialsWait bounds how long a start with snapshots to remount
	// waits for hostlet to hand over the credentials it holds (hostlet
	// may be down: then the private ones stay unmounted, as before).
	CredentialsWait time.Duration
}

// Run serves the snapshotter until ctx ends, then unmounts its snapshots.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Root == "" || cfg.Address == "" || cfg.CredentialsSocket == "" {
		return errors.New("root, address and credentials socket are required")
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return err
	}
	// The remote snapshotter is the overlayfs one with FUSE lower layers.
	if err := service.Supported(cfg.Root); err != nil {
		return fmt.Errorf("stargz snapshotter not supported on %s: %w", cfg.Root, err)
	}
	creds := &Credentials{}
	// The credentials socket first: a hostlet watching it hands over the
	// credentials of its running containers' images before the remounts
	// below need them.
	if err := serveCredentials(ctx, cfg.CredentialsSocket, creds); err != nil {
		return err
	}
	if hasSnapshots(cfg.Root) {
		waitSynced(ctx, creds.Synced(), cfg.CredentialsWait)
	}
	stale := staleCaches(cfg.Root)
	var scfg service.Config
	scfg.NoBackgroundFetch = cfg.NoBackgroundFetch
	// At start the snapshotter remounts the remote snapshots it had, from
	// their registries: one it cannot reach, or a private one (the
	// credentials hostlet handed over are gone with the old process), is
	// left invalid rather than failing the start, so the others work.
	scfg.AllowInvalidMountsOnRestart = true
	sn, err := service.NewStargzSnapshotterService(ctx, cfg.Root, &scfg,
		service.WithCustomRegistryHosts(registryHosts(ctx, cfg.RegistryConfigDir, creds)),
		service.WithFilesystemOptions(
			stargzfs.WithMetadataStore(memorymetadata.NewReader),
			stargzfs.WithMetricsLogLevel(clog.InfoLevel)))
	if err != nil {
		return fmt.Errorf("stargz snapshotter: %w", err)
	}
	// Unmounted last: the containers on these mounts lose their root
	// filesystems, as with upstream's containerd-stargz-grpc without its
	// FUSE manager; left mounted, they would be dead FUSE mounts.
	defer sn.Close()
	removeStaleCaches(stale)
	if err := serveSnapshots(ctx, cfg.Address, snapshotservice.FromSnapshotter(sn)); err != nil {
		return err
	}
	log.WithFields(log.Fields{"address": cfg.Address, "root": cfg.Root}).Info("stargz snapshotter serving")
	<-ctx.Done()
	log.Info("stargz snapshotter stopping: unmounting its snapshots")
	return nil
}

// hasSnapshots says whether a previous run left snapshots under root
// (the snapshotter's metadata database), which the start remounts.
func hasSnapshots(root string) bool {
	_, err := os.Stat(filepath.Join(root, "snapshotter", "metadata.db"))
	return err == nil
}

// The snapshotter keeps the chunks it fetched of a layer in a directory
// of its own per mount of the layer (fs/layer: a temporary directory
// under stargz/fscache and stargz/httpcache), removed when the layer is
// released: unmounted (its snapshot removed, after image GC) and unused a
// while. A process that stops leaves them all: nothing of a later one
// refers to them (its remounts fetch anew), and nothing removes them.

// cacheDirs are the snapshotter's layer cache directories under root.
var cacheDirs = []string{filepath.Join("stargz", "fscache"), filepath.Join("stargz", "httpcache")}

// staleCaches are the layer caches a previous process left under root.
func staleCaches(root string) []string {
	var out []string
	for _, d := range cacheDirs {
		es, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range es {
			out = append(out, filepath.Join(root, d, e.Name()))
		}
	}
	return out
}

// removeStaleCaches removes them once this process holds the root (its
// metadata database is open: no other process serves it any more).
func removeStaleCaches(dirs []string) {
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			log.WithError(err).WithField("dir", d).Warn("stargz snapshotter: removing a previous run's layer cache")
		}
	}
	if len(dirs) > 0 {
		log.WithField("dirs", len(dirs)).Info("stargz snapshotter: removed the layer caches of a previous run")
	}
}

// waitSynced waits for hostlet's PUT /synced, at most wait.
func waitSynced(ctx context.Context, synced <-chan struct{}, wait time.Duration) {
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-synced:
		log.Info("stargz snapshotter: hostlet handed over its credentials; remounting the snapshots")
	case <-t.C:
		log.WithField("waited", wait).Warn("stargz snapshotter: no credentials from hostlet; remounting the snapshots without (private images stay unmounted)")
	case <-ctx.Done():
	}
}

// registryHosts resolves a layer's registry as hostlet's pull does (the
// hosts.toml dir), offering the credentials hostlet last handed over for
// the image reference.
func registryHosts(ctx context.Context, dir string, creds *Credentials) func(reference.Spec) ([]docker.RegistryHost, error) {
	return func(spec reference.Spec) ([]docker.RegistryHost, error) {
		ref := spec.String()
		opts := config.HostOptions{Credentials: func(string) (string, string, error) {
			user, secret := creds.Lookup(ref)
			return user, secret, nil
		}}
		if dir != "" {
			opts.HostDir = config.HostDirFromRoot(dir)
		}
		return config.ConfigureHosts(ctx, opts)(spec.Hostname())
	}
}

// serveCredentials serves creds on a root-only socket until ctx ends.
// serveSnapshots serves containerd's snapshots API on socket. A panic in
// a call fails that call only: the callers are pods' starts.
func serveSnapshots(ctx context.Context, socket string, snapshots snapshotsapi.SnapshotsServer) error {
	ln, err := listenUnix(socket, 0o750, 0o660)
	if err != nil {
		return err
	}
	l := log.WithField("server", "stargz-snapshotter")
	srv := grpc.NewServer(grpc.UnaryInterceptor(crash.UnaryServerInterceptor(l)))
	snapshotsapi.RegisterSnapshotsServer(srv, snapshots)
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil {
			l.WithError(err).Error("gRPC server stopped")
		}
	}()
	return nil
}

// serveCredentials serves the credentials socket, root's only.
func serveCredentials(ctx context.Context, socket string, creds *Credentials) error {
	ln, err := listenUnix(socket, 0o700, 0o600)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: creds, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("stargz credentials socket stopped")
		}
	}()
	return nil
}

// listenUnix listens on socket, replacing a stale one a previous run left,
// its directory made with dirMode and the socket given mode. The package
// does its own serving rather than use provider/grpcsock: runtime imports
// it (the credentials client), and runtime reaches up into no provider
// package.
func listenUnix(socket string, dirMode, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), dirMode); err != nil {
		return nil, err
	}
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, mode); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

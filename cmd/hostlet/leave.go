package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/join"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/pluginwatcher"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	log "github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// runLeave is `hostlet leave`: drain, stop, delete the Node, clean the
// host, remove join's files.
func runLeave(ctx context.Context, args []string) error {
	var cfg join.LeaveConfig
	var hostletArgs map[string]string
	fs := pflag.NewFlagSet("hostlet leave", pflag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(os.Stderr, "usage: hostlet leave [flags]\n%s", fs.FlagUsages()) }
	fs.StringVar(&cfg.Layout.StateDir, "state-dir", "/var/lib/hostlet", "the state dir join wrote to")
	fs.StringVar(&cfg.Layout.UnitDir, "unit-dir", "/etc/systemd/system", "the dir join wrote the systemd unit to")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "credentials for the drain and the Node's deletion (default: the node's own, from join)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "how long to wait for pods to be evicted (PodDisruptionBudgets may hold them)")
	fs.BoolVar(&cfg.SkipSystemd, "skip-systemd", false, "hostlet does not run as join's systemd unit (give --stop-command)")
	fs.StringVar(&cfg.StopCommand, "stop-command", "", "shell command that stops hostlet and returns once it has (instead of systemctl)")
	force := fs.Bool("force", false, "CSI volumes whose driver is gone for good (its node plugin will not run again): unmount them without the driver, as kubeadm reset does, instead of stopping; what the driver holds outside the root dir (loop devices, attached disks) stays")
	fs.StringToStringVar(&hostletArgs, "hostlet-arg", nil, "flags hostlet ran with besides its config file and the flags file join wrote (name=value,...), so that its pods' leftovers are found where it put them")
	// hostlet has it fixed; tests move it.
	logindDir := fs.String("logind-conf-dir", node.DefaultLogindConfDir, "")
	_ = fs.MarkHidden("logind-conf-dir")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Out = os.Stdout
	cfg.CleanHost = func(ctx context.Context) error {
		if err := cleanHost(ctx, cfg.Layout, hostletArgs, *force); err != nil {
			return err
		}
		return removeLogindOverride(ctx, *logindDir)
	}
	return join.Leave(ctx, cfg)
}

// hostletOptions are the settings hostlet ran with: its config file (join
// wrote it) and the flags given besides (join's flags file, and leave's
// --hostlet-arg over them).
func hostletOptions(configFile string, args map[string]string) (*options, error) {
	argv := []string{"--config", configFile}
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		argv = append(argv, "--"+k+"="+args[k])
	}
	var o options
	if err := o.parse(argv); err != nil {
		return nil, fmt.Errorf("hostlet's settings: %w", err)
	}
	return &o, nil
}

// cleanHost removes, once hostlet is stopped, what it made on the host for
// pods: first the CSI drivers unpublish and unstage the volumes still on
// the node, as for a drained node's pods; then, as the orphan sweep of a
// hostlet that knows no pod would, the containers (running ones killed),
// sandboxes (CNI DEL, network namespaces), pod cgroups, pod directories
// (volumes unmounted), logs and their symlinks; then the kubepods cgroups
// (slices), the directories hostlet made for pods if empty, and the root
// dir once nothing is mounted below it.
func cleanHost(ctx context.Context, layout join.Layout, args map[string]string, force bool) error {
	configFile := layout.ConfigFile()
	if _, err := os.Stat(configFile); errors.Is(err, os.ErrNotExist) {
		log.WithField("config", configFile).Warn("no hostlet config file: the host's pods are not cleaned up")
		return nil
	}
	flags, err := join.ReadFlagsFile(layout.FlagsFile())
	if err != nil {
		return err
	}
	for k, v := range args {
		flags[k] = v
	}
	o, err := hostletOptions(configFile, flags)
	if err != nil {
		return err
	}
	// The node IP is a sandbox's address with the host's network only;
	// nothing is created here.
	nodeIP := o.nodeIP
	if nodeIP == "" {
		nodeIP = "127.0.0.1"
	}
	rt, err := newRuntime(o, nodeIP, nil, nil)
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.Healthy(ctx); err != nil {
		return fmt.Errorf("containerd (%s): %w", o.runtimeEndpoint, err)
	}
	// The drivers tear their volumes down first, while their node plugins
	// (pods or host processes) still run: once the containers are killed a
	// driver's own pod could not answer. The CSI plugin stays podspec's, so
	// nothing a driver mounted is unmounted behind its back.
	csiVolumes := csi.New(csi.Config{RootDir: o.rootDir})
	if err := tearDownCSI(ctx, volumes.NewLayout(o.rootDir), csiVolumes); err != nil {
		if !force {
			return err
		}
		log.WithError(err).Warn("csi: --force: the volumes the drivers did not tear down are unmounted without them")
		unmounted, ferr := csiVolumes.ForceTearDownAll()
		for _, p := range unmounted {
			log.WithField("mount", p).Warn("csi: unmounted without its driver")
		}
		if ferr != nil {
			return fmt.Errorf("--force: %w", ferr)
		}
	}
	spec := podspec.New(podspec.Config{RootDir: o.rootDir, HostIPs: []string{nodeIP}, Runtime: rt, CSI: csiVolumes})
	prov := provider.New(ctx, provider.Config{RootDir: o.rootDir, PodLogsDir: o.podLogsDir, Containers: rt, Host: spec})
	left, err := prov.CleanupAll(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("pods still found on the host after their cleanup (uids %v)", left)
	}
	if err := rt.Cgroups().RemoveKubepods(ctx); err != nil {
		return fmt.Errorf("removing the kubepods cgroups: %w", err)
	}
	removeEmptyDirs(volumes.NewLayout(o.rootDir).PodsDir(), filepath.Join(o.rootDir, "netns"), filepath.Join(o.rootDir, "fifo"),
		o.podLogsDir, o.containerLogsDir)
	kept, err := volumes.NewLayout(o.rootDir).RemoveRoot()
	if err != nil {
		return fmt.Errorf("the root dir: %w (unmount what is listed, after checking whose it is, and run hostlet leave again)", err)
	}
	if kept {
		log.WithField("dir", o.rootDir).Info("the root dir is a mount point: emptied, kept")
	} else {
		log.WithField("dir", o.rootDir).Info("the root dir removed")
	}
	return nil
}

// tearDownCSI has the CSI drivers registered in the plugin registry
// unpublish and unstage the volumes still on the node. A volume they did
// not tear down stops leave before anything is killed or removed, so that
// a driver running here can be made to answer and leave run again.
func tearDownCSI(ctx context.Context, layout volumes.Layout, m *csi.Manager) error {
	plugins, listErr := pluginwatcher.List(ctx, layout.PluginsRegistryDir())
	for _, p := range plugins {
		if p.Type != registerapi.CSIPlugin {
			continue
		}
		if err := m.UseDriver(p); err != nil {
			log.WithError(err).Warn("csi: a registered driver not used")
			continue
		}
		log.WithFields(log.Fields{"driver": p.Name, "endpoint": p.Endpoint}).Info("csi: driver found in the plugin registry")
	}
	err := m.TearDownAll(ctx)
	if err == nil {
		return nil
	}
	if listErr != nil {
		err = errors.Join(err, listErr)
	}
	mounts, merr := layout.MountsBelow()
	if merr != nil {
		mounts = []string{merr.Error()}
	}
	return fmt.Errorf("CSI volumes not torn down by their drivers; no container was killed and nothing removed:\n%w\n"+
		"mounts still below the root dir: %s\n"+
		"have each driver named answer (its node plugin running, its registration socket in %s) and run hostlet leave again; "+
		"a driver gone for good: run hostlet leave --force, which unmounts them without it",
		err, strings.Join(mounts, ", "), layout.PluginsRegistryDir())
}

// removeEmptyDirs removes each directory that is empty, and leaves the
// others: what is in them is not hostlet's to remove.
func removeEmptyDirs(dirs ...string) {
	for _, d := range dirs {
		if err := os.Remove(d); err == nil {
			log.WithField("dir", d).Info("removed")
		}
	}
}

// removeLogindOverride removes the logind drop-in hostlet wrote for
// graceful node shutdown, if it is hostlet's, and has logind reload.
func removeLogindOverride(ctx context.Context, dir string) error {
	removed, err := node.RemoveLogindOverride(dir, func() error { return node.ReloadLogind(ctx) })
	switch {
	case removed && err != nil:
		// Gone from the disk: logind drops it at its next reload or boot.
		log.WithError(err).Warn("hostlet's logind drop-in removed, but logind not reloaded")
	case removed:
		log.WithField("dir", dir).Info("hostlet's logind drop-in removed, logind reloaded")
	case err != nil:
		return fmt.Errorf("logind drop-in: %w", err)
	}
	return nil
}

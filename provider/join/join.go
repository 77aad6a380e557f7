package join

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
)

// Config is everything `hostlet join` was asked for.
type Config struct {
	Discovery DiscoveryConfig
	Preflight PreflightConfig
	Layout    Layout
	NodeName  string
	// RootDir is hostlet's --root-dir (pods' state), written to the config.
	RootDir string
	// CgroupDriver and CgroupRoot are hostlet's --cgroup-driver and
	// --cgroup-root, written when set: a host whose pods' cgroups go
	// elsewhere than /kubepods, or whose containerd says no driver.
	CgroupDriver, CgroupRoot string
	// ClusterDNS and ClusterDomain are hostlet's --cluster-dns and
	// --cluster-domain as the user gave them; each one not given is taken
	// from the cluster (findClusterDNS), as kubeadm join takes them.
	ClusterDNS    []string
	ClusterDomain string
	// ExtraSettings are more of hostlet's flags for its config file.
	ExtraSettings map[string]string
	// BootstrapTimeout bounds waiting for the CSR to be issued.
	BootstrapTimeout time.Duration
	// Executable is the hostlet binary the unit runs.
	Executable string
	// SkipSystemd writes no unit and starts nothing (tests, other supervisors).
	SkipSystemd bool
	// WaitTimeout bounds waiting, once systemd started hostlet, for the
	// Node to be registered and Ready; 0 does not wait.
	WaitTimeout time.Duration
	// DryRun checks and discovers, then prints what it would write to Out.
	DryRun bool
	Out    io.Writer
}

// Join makes this host a node: nothing is written before preflight and
// discovery succeeded and the node's certificate was issued, and a rerun
// keeps an identity that is still valid and rewrites only what changed.
func Join(ctx context.Context, cfg Config) error {
	if _, err := cfg.settings(); err != nil {
		return err
	}
	if _, err := cfg.explicitDNS(); err != nil {
		return err
	}
	if err := Preflight(ctx, cfg.Preflight); err != nil {
		return err
	}
	cluster, err := Discover(ctx, cfg.Discovery)
	if err != nil {
		return err
	}
	client, err := bootstrapClient(cluster, cfg.Discovery.Token)
	if err != nil {
		return err
	}
	ours := cfg.Layout.currentIdentity(cluster.CAPEM) == cfg.NodeName
	if err := checkNodeName(ctx, client, cfg.NodeName, ours); err != nil {
		return err
	}

	dns, err := findClusterDNS(ctx, client, cfg)
	if err != nil {
		return err
	}
	dns.report(cfg.Out)
	settings, err := cfg.settings()
	if err != nil {
		return err
	}
	dns.apply(settings)
	conf, err := configFile(cfg.Layout, settings)
	if err != nil {
		return err
	}
	kubeconfig, err := kubeconfigFile(cfg.Layout, cluster, cfg.NodeName)
	if err != nil {
		return err
	}
	serving, err := servingFiles(cfg.Layout, cfg.NodeName)
	if err != nil {
		return err
	}
	files := append([]file{{path: cfg.Layout.CAFile(), mode: 0o644, data: cluster.CAPEM}, kubeconfig, conf}, serving...)
	if !cfg.SkipSystemd {
		files = append(files, unitFile(cfg.Layout, cfg.Executable))
	}

	if cfg.DryRun {
		return printPlan(cfg, files, ours)
	}
	if !ours {
		cert, key, err := RequestClientCert(ctx, client, cfg.NodeName, cfg.BootstrapTimeout)
		if err != nil {
			return err
		}
		store, err := cfg.Layout.ClientStore()
		if err != nil {
			return err
		}
		if _, err := store.Update(cert, key); err != nil {
			return fmt.Errorf("writing the client certificate: %w", err)
		}
	} else {
		log.WithField("node", cfg.NodeName).Info("this host already holds a valid identity for the node: keeping it")
	}
	for _, f := range files {
		if err := f.write(); err != nil {
			return err
		}
	}
	log.WithFields(log.Fields{"node": cfg.NodeName, "config": cfg.Layout.ConfigFile()}).Info("node credentials and config written")
	return start(ctx, cfg)
}

// start enables and (re)starts the unit and waits for the node to be Ready,
// or says how to run hostlet.
func start(ctx context.Context, cfg Config) error {
	run := fmt.Sprintf("%s --config %s", cfg.Executable, cfg.Layout.ConfigFile())
	switch {
	case cfg.SkipSystemd:
		fmt.Fprintf(cfg.Out, "Joined as node %s. Start hostlet with:\n  %s\n", cfg.NodeName, run)
		return nil
	case !systemdRuns():
		fmt.Fprintf(cfg.Out, "Joined as node %s. systemd does not run here: start hostlet under your supervisor with:\n  %s\n", cfg.NodeName, run)
		return nil
	}
	// Only a status written after this is the restarted hostlet's.
	restarted := time.Now()
	for _, args := range [][]string{{"daemon-reload"}, {"enable", unitName}, {"restart", unitName}} {
		if err := systemctl(args...); err != nil {
			return err
		}
	}
	if cfg.WaitTimeout == 0 {
		fmt.Fprintf(cfg.Out, "Joined as node %s; %s is enabled and started (not waiting for the node to be Ready). Watch it with: journalctl -u hostlet -f\n", cfg.NodeName, unitName)
		return nil
	}
	if err := waitNodeReady(ctx, cfg, restarted); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "Joined as node %s: %s runs and the node is Ready. Watch it with: journalctl -u hostlet -f\n", cfg.NodeName, unitName)
	return nil
}

func printPlan(cfg Config, files []file, ours bool) error {
	w := cfg.Out
	fmt.Fprintf(w, "[dry-run] preflight and discovery passed; node %s\n", cfg.NodeName)
	if ours {
		fmt.Fprintf(w, "[dry-run] would keep the client certificate in %s (valid for this node)\n", cfg.Layout.ClientPairFile())
	} else {
		fmt.Fprintf(w, "[dry-run] would request a client certificate for system:node:%s and write it to %s (0600)\n", cfg.NodeName, cfg.Layout.ClientPairFile())
	}
	for _, f := range files {
		fmt.Fprintf(w, "[dry-run] would write %s (%04o)", f.path, f.mode)
		if f.private {
			fmt.Fprintln(w, ": a private key")
			continue
		}
		fmt.Fprintf(w, ":\n%s\n", f.data)
	}
	if !cfg.SkipSystemd {
		fmt.Fprintf(w, "[dry-run] would run: systemctl daemon-reload; systemctl enable %s; systemctl restart %s\n", unitName, unitName)
	}
	return nil
}

// settings are hostlet's config file, keyed by flag name. The cgroup
// settings are checked as hostlet checks them at start, so a join does not
// write a config hostlet refuses.
func (cfg Config) settings() (map[string]any, error) {
	settings := map[string]any{
		"kubeconfig":                 cfg.Layout.Kubeconfig(),
		"hostname-override":          cfg.NodeName,
		"root-dir":                   cfg.RootDir,
		"tls-cert-file":              cfg.Layout.ServingCert(),
		"tls-private-key-file":       cfg.Layout.ServingKey(),
		"client-ca-file":             cfg.Layout.CAFile(),
		"container-runtime-endpoint": cfg.Preflight.RuntimeEndpoint,
		"cni-conf-dir":               cfg.Preflight.CNIConfDir,
		"cni-bin-dir":                cfg.Preflight.CNIBinDirs,
	}
	if cfg.CgroupDriver != "" || cfg.CgroupRoot != "" {
		driver := cfg.CgroupDriver
		if driver == "" {
			driver = runtime.CgroupDriverCgroupfs
		}
		if _, err := runtime.NewCgroups(runtime.CgroupConfig{Driver: driver, Root: cfg.CgroupRoot, PerQOS: true}, false); err != nil {
			return nil, err
		}
	}
	if cfg.CgroupDriver != "" {
		settings["cgroup-driver"] = cfg.CgroupDriver
	}
	if cfg.CgroupRoot != "" {
		settings["cgroup-root"] = cfg.CgroupRoot
	}
	for k, v := range cfg.ExtraSettings {
		settings[k] = v
	}
	return settings, nil
}

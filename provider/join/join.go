package join

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
)

// Config is everything `hostlet join` was asked for.
type Config struct {
	Discovery DiscoveryConfig
	Preflight PreflightConfig
	Layout    Layout
	NodeName  string
	// RootDir is hostlet's --root-dir (pods' state), written to the flags.
	RootDir string
	// CgroupDriver and CgroupRoot are the KubeletConfiguration's
	// cgroupDriver and cgroupRoot, written when set: a host whose pods'
	// cgroups go elsewhere than /kubepods, or whose containerd says no
	// driver.
	CgroupDriver, CgroupRoot string
	// ClusterDNS and ClusterDomain are the KubeletConfiguration's clusterDNS
	// and clusterDomain as the user gave them; each one not given is taken
	// from the cluster (findClusterDNS), as kubeadm join takes them.
	ClusterDNS    []string
	ClusterDomain string
	// ExtraSettings are more of hostlet's flags, written to its flags file
	// (they win over the KubeletConfiguration, as command-line flags do).
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
	if _, _, err := cfg.settings(); err != nil {
		return err
	}
	if _, err := cfg.explicitDNS(); err != nil {
		return err
	}
	cluster, err := preflightAndDiscover(ctx, cfg)
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
	kubelet, flags, err := cfg.settings()
	if err != nil {
		return err
	}
	dns.apply(kubelet)
	conf, err := configFile(cfg.Layout, kubelet)
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
	files := append([]file{{path: cfg.Layout.CAFile(), mode: 0o644, data: cluster.CAPEM}, kubeconfig, conf, flagsFile(cfg.Layout, flags)}, serving...)
	if !cfg.SkipSystemd {
		files = append(files, unitFile(cfg.Layout, cfg.Executable))
		// With the unit, as the host's /etc is join's to write then only
		// (--skip-systemd leaves it alone: tests, other supervisors).
		if f, ok := crictlFile(cfg.Layout, flags); ok {
			files = append(files, f)
		}
		if cfg.Preflight.ImageSnapshotter != "" {
			files = append(files, stargzUnitFile(cfg.Layout, cfg.Executable, flags["registry-config-dir"]))
		}
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
	if err := writeFiles(files); err != nil {
		return err
	}
	log.WithFields(log.Fields{"node": cfg.NodeName, "config": cfg.Layout.ConfigFile(), "flags": cfg.Layout.FlagsFile()}).Info("node credentials and config written")
	return start(ctx, cfg, flags)
}

// preflightAndDiscover runs the host's preflight checks and the cluster's
// discovery side by side: neither writes anything, and each costs tens of
// milliseconds of a join (the checks read every process's name and ask
// containerd; discovery reads cluster-info twice). A failed check is the
// join's error, as when they ran one after the other, and ends the
// discovery (which may be waiting for the server).
func preflightAndDiscover(ctx context.Context, cfg Config) (*Cluster, error) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type discovery struct {
		cluster *Cluster
		err     error
	}
	done := make(chan discovery, 1)
	go func() {
		c, err := Discover(dctx, cfg.Discovery)
		done <- discovery{c, err}
	}()
	if err := Preflight(ctx, cfg.Preflight); err != nil {
		return nil, err
	}
	d := <-done
	return d.cluster, d.err
}

// writeFiles writes the node's files at once, each on its own (every write
// is synced to disk, one at a time they add up on a busy disk); the first
// error is returned once all are done. A rerun of join writes what is
// missing or different.
func writeFiles(files []file) error {
	var g errgroup.Group
	for _, f := range files {
		g.Go(f.write)
	}
	return g.Wait()
}

// start enables and (re)starts the unit and waits for the node to be Ready,
// or says how to run hostlet.
func start(ctx context.Context, cfg Config, flags map[string]string) error {
	run := strings.Join(append([]string{cfg.Executable, "--config", cfg.Layout.ConfigFile()}, flagArgs(flags)...), " ")
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
	// --no-block: a Type=notify unit's restart returns once hostlet says
	// it is ready; join waits for the Node itself, and says why it is not.
	commands := [][]string{{"daemon-reload"}, {"enable", unitName}, {"restart", "--no-block", unitName}}
	if cfg.Preflight.ImageSnapshotter != "" {
		// Started if not running, never restarted: its mounts are the
		// running containers' root filesystems.
		commands = slices.Insert(commands, 1, []string{"enable", "--now", stargzUnitName})
	}
	for _, args := range commands {
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
		if cfg.Preflight.ImageSnapshotter != "" {
			fmt.Fprintf(w, "[dry-run] would run: systemctl enable --now %s\n", stargzUnitName)
		}
		fmt.Fprintf(w, "[dry-run] would run: systemctl daemon-reload; systemctl enable %s; systemctl restart --no-block %s\n", unitName, unitName)
	}
	return nil
}

// settings are what hostlet runs with: its KubeletConfiguration (as
// kubeadm writes the kubelet's config.yaml: the files join wrote, the
// runtime, the cgroup layout, certificate rotation; the DNS is added once
// found) and the flags that are not KubeletConfiguration fields (the node's
// identity, root dir and CNI, as kubeadm's kubeadm-flags.env), with
// ExtraSettings. The cgroup settings are checked as hostlet checks them at
// start, so a join does not write a config hostlet refuses.
func (cfg Config) settings() (kubelet map[string]any, flags map[string]string, err error) {
	kubelet = map[string]any{
		"apiVersion":        "kubelet.config.k8s.io/v1beta1",
		"kind":              "KubeletConfiguration",
		"tlsCertFile":       cfg.Layout.ServingCert(),
		"tlsPrivateKeyFile": cfg.Layout.ServingKey(),
		"authentication": map[string]any{
			"x509": map[string]any{"clientCAFile": cfg.Layout.CAFile()},
		},
		"containerRuntimeEndpoint": cfg.Preflight.RuntimeEndpoint,
		// The client certificate join had issued is renewed before it
		// expires (selfnodeclient CSRs).
		"rotateCertificates": true,
	}
	flags = map[string]string{
		"kubeconfig":        cfg.Layout.Kubeconfig(),
		"hostname-override": cfg.NodeName,
		"root-dir":          cfg.RootDir,
		"cni-conf-dir":      cfg.Preflight.CNIConfDir,
		"cni-bin-dir":       strings.Join(cfg.Preflight.CNIBinDirs, ","),
	}
	if cfg.CgroupDriver != "" || cfg.CgroupRoot != "" {
		driver := cfg.CgroupDriver
		if driver == "" {
			driver = runtime.CgroupDriverCgroupfs
		}
		if _, err := runtime.NewCgroups(runtime.CgroupConfig{Driver: driver, Root: cfg.CgroupRoot, PerQOS: true}, false); err != nil {
			return nil, nil, err
		}
	}
	if cfg.CgroupDriver != "" {
		kubelet["cgroupDriver"] = cfg.CgroupDriver
	}
	if cfg.CgroupRoot != "" {
		kubelet["cgroupRoot"] = cfg.CgroupRoot
	}
	if cfg.Preflight.ImageSnapshotter != "" {
		flags["image-snapshotter"] = cfg.Preflight.ImageSnapshotter
	}
	for k, v := range cfg.ExtraSettings {
		// The DNS goes into the configuration (explicitDNS reads it).
		if k != clusterDNSSetting && k != clusterDomainSetting {
			flags[k] = v
		}
	}
	for k, v := range flags {
		if strings.ContainsAny(k+v, " \t\n\"'\\$%") {
			return nil, nil, fmt.Errorf("hostlet flag %s=%q: join writes no whitespace, quotes, backslashes, $ or %% into %s", k, v, cfg.Layout.FlagsFile())
		}
	}
	return kubelet, flags, nil
}

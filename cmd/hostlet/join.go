package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hostlet/hostlet/provider/join"
	"github.com/spf13/pflag"
)

// runJoin is `hostlet join <apiserver-url> --token ... --discovery-token-ca-cert-hash ...`.
func runJoin(ctx context.Context, args []string) error {
	var cfg join.Config
	var hashes, ignore []string
	fs := pflag.NewFlagSet("hostlet join", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: hostlet join <apiserver-url> --token <id.secret> --discovery-token-ca-cert-hash sha256:<hex> [flags]\n%s", fs.FlagUsages())
	}
	fs.StringVar(&cfg.Discovery.Token, "token", "", "bootstrap token <id>.<secret> (the chart's NOTES print it)")
	fs.StringSliceVar(&hashes, "discovery-token-ca-cert-hash", nil, "sha256:<hex> pin of the cluster CA's public key (the chart's NOTES say how to compute it)")
	fs.DurationVar(&cfg.Discovery.Timeout, "discovery-timeout", 5*time.Minute, "how long to wait for the API server and the token's signature on cluster-info")
	fs.DurationVar(&cfg.BootstrapTimeout, "tls-bootstrap-timeout", 5*time.Minute, "how long to wait for the node's CSR to be approved and issued")
	fs.StringVar(&cfg.NodeName, "node-name", "", "node name (default: the host name)")
	fs.StringVar(&cfg.Layout.StateDir, "state-dir", "/var/lib/hostlet", "where the node's credentials, KubeletConfiguration (config.yaml) and flags (hostlet-flags.env) are written")
	fs.StringVar(&cfg.Layout.UnitDir, "unit-dir", "/etc/systemd/system", "where the systemd unit is written")
	fs.StringVar(&cfg.Layout.CrictlConfig, "crictl-config", "/etc/crictl.yaml", "crictl's config, pointed at the CRI socket; written with the systemd unit, only if none exists (empty: never)")
	fs.StringVar(&cfg.RootDir, "root-dir", "/var/lib/kubelet", "hostlet's --root-dir (pods' state and plugin sockets, the kubelet's by default)")
	fs.StringVar(&cfg.Preflight.RuntimeEndpoint, "container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "containerd endpoint")
	fs.StringVar(&cfg.Preflight.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "CNI network configs")
	fs.StringSliceVar(&cfg.Preflight.CNIBinDirs, "cni-bin-dir", []string{"/opt/cni/bin", "/usr/lib/cni"}, "CNI plugin directories")
	fs.StringVar(&cfg.CgroupDriver, "cgroup-driver", "", "cgroupDriver of hostlet's KubeletConfiguration (cgroupfs or systemd); empty: what containerd says, else the host's")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", "", "cgroupRoot of hostlet's KubeletConfiguration, the cgroup (cgroupfs form) the kubepods hierarchy goes below; empty: /")
	fs.StringSliceVar(&cfg.ClusterDNS, "cluster-dns", nil, "clusterDNS of hostlet's KubeletConfiguration, the DNS server IPs of pods; empty: the cluster's, from kube-system/kubelet-config (kubeadm) or kube-system/"+join.ChartKubeletConfigMap+" (the hostlet chart)")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", "", "clusterDomain of hostlet's KubeletConfiguration; empty: the cluster's, from the same ConfigMaps")
	fs.StringVar(&cfg.Preflight.ImageSnapshotter, "image-snapshotter", "", "\"stargz\": lazy image pulls: join writes and starts a unit running `hostlet stargz-snapshotter`, sets hostlet's --image-snapshotter, and checks that containerd has it as its proxy snapshotter")
	fs.StringToStringVar(&cfg.ExtraSettings, "hostlet-arg", nil, "more hostlet flags (name=value,...), e.g. node-ip=10.0.0.5: written to hostlet-flags.env beside its KubeletConfiguration (config.yaml), they win over it")
	fs.StringSliceVar(&ignore, "ignore-preflight-errors", nil, "preflight checks whose errors become warnings ("+strings.Join(append(join.CheckNames(), "all"), ", ")+")")
	fs.BoolVar(&cfg.SkipSystemd, "skip-systemd", false, "write no systemd unit and start nothing (print how to start hostlet)")
	fs.DurationVar(&cfg.WaitTimeout, "wait-timeout", 2*time.Minute, "how long to wait, once systemd started hostlet, for the node to be registered and Ready (0: do not wait)")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "check and discover, then print what would be written, writing nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || !strings.HasPrefix(fs.Arg(0), "https://") {
		fs.Usage()
		return errors.New("hostlet join needs the API server URL (https://host:port) as its one argument")
	}
	cfg.Discovery.Server = fs.Arg(0)
	cfg.Discovery.CAHashes = hashes
	cfg.Preflight.Ignore = map[string]bool{}
	for _, name := range ignore {
		cfg.Preflight.Ignore[name] = true
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		cfg.NodeName = strings.ToLower(h)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Executable = self
	cfg.Out = os.Stdout
	return join.Join(ctx, cfg)
}

// runSubcommand runs join or leave and exits: 0 on success, 1 with the
// error on stderr otherwise.
func runSubcommand(name string, args []string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	run := runJoin
	if name == "leave" {
		run = runLeave
	}
	if err := run(ctx, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		stop()
		fmt.Fprintf(os.Stderr, "hostlet %s: %v\n", name, err)
		os.Exit(1)
	}
}

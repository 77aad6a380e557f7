package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hostlet/hostlet/stargz"
	"github.com/spf13/pflag"
)

// runStargzSnapshotter is `hostlet stargz-snapshotter`: the stargz
// snapshotter as a process of its own (its FUSE mounts outlive hostlet's
// restarts), containerd's proxy snapshotter "stargz".
func runStargzSnapshotter(args []string) {
	fs := pflag.NewFlagSet("hostlet stargz-snapshotter", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: hostlet stargz-snapshotter [flags]\n%s", fs.FlagUsages())
	}
	var cfg stargz.Config
	fs.StringVar(&cfg.Root, "root", stargz.DefaultRoot, "snapshots, layer cache and FUSE mounts")
	fs.StringVar(&cfg.Address, "address", stargz.DefaultAddress, "unix socket of the snapshots API (containerd's proxy_plugins address)")
	fs.StringVar(&cfg.CredentialsSocket, "credentials-socket", stargz.DefaultCredentialsSocket, "unix socket hostlet hands pull credentials to (hostlet's --stargz-credentials-socket)")
	fs.StringVar(&cfg.RegistryConfigDir, "registry-config-dir", "", "containerd-style hosts.toml directory per registry (hostlet's)")
	fs.DurationVar(&cfg.CredentialsWait, "credentials-wait", 10*time.Second, "at a start with snapshots to remount: how long to wait for hostlet to hand over the credentials of its running containers' images first")
	fs.BoolVar(&cfg.NoBackgroundFetch, "no-background-fetch", false, "fetch only the files read (default: a mounted layer's other files too, in the background)")
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		err = stargz.Run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostlet stargz-snapshotter: %v\n", err)
		os.Exit(1)
	}
}

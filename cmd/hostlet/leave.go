package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hostlet/hostlet/provider/join"
	"github.com/spf13/pflag"
)

// runLeave is `hostlet leave`: drain, stop, delete the Node, remove join's files.
func runLeave(ctx context.Context, args []string) error {
	var cfg join.LeaveConfig
	fs := pflag.NewFlagSet("hostlet leave", pflag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(os.Stderr, "usage: hostlet leave [flags]\n%s", fs.FlagUsages()) }
	fs.StringVar(&cfg.Layout.StateDir, "state-dir", "/var/lib/hostlet", "the state dir join wrote to")
	fs.StringVar(&cfg.Layout.UnitDir, "unit-dir", "/etc/systemd/system", "the dir join wrote the systemd unit to")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "credentials for the drain and the Node's deletion (default: the node's own, from join)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "how long to wait for pods to be evicted (PodDisruptionBudgets may hold them)")
	fs.BoolVar(&cfg.SkipSystemd, "skip-systemd", false, "hostlet does not run as join's systemd unit (give --stop-command)")
	fs.StringVar(&cfg.StopCommand, "stop-command", "", "shell command that stops hostlet and returns once it has (instead of systemctl)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Out = os.Stdout
	return join.Leave(ctx, cfg)
}

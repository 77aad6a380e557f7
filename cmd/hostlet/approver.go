package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hostlet/hostlet/approver"
	log "github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// runApproveServing is `hostlet approve-serving`: the chart's approver of
// nodes' kubelet-serving CSRs, in the cluster. It is a subcommand, not a
// binary of its own, so the image runs the same release as the nodes.
func runApproveServing(args []string) {
	fs := pflag.NewFlagSet("hostlet approve-serving", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: hostlet approve-serving [--kubeconfig FILE]\n%s", fs.FlagUsages())
	}
	kubeconfig := fs.String("kubeconfig", "", "credentials (default: the pod's service account)")
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		err = approveServing(ctx, *kubeconfig)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostlet approve-serving: %v\n", err)
		os.Exit(1)
	}
}

func approveServing(ctx context.Context, kubeconfig string) error {
	cfg, err := rest.InClusterConfig()
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return err
	}
	cfg.UserAgent = "hostlet-approve-serving"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	a, err := approver.New(client)
	if err != nil {
		return err
	}
	log.WithField("server", cfg.Host).Info("hostlet approve-serving starting")
	return a.Run(ctx)
}

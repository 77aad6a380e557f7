package main

import (
	"context"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/podsync"
	"github.com/hostlet/hostlet/runtime"
	"k8s.io/client-go/kubernetes"
)

// newProvider is the provider: it runs the pods podsync and the static pod
// manager hand it through spec, in the registry spec reads, and hands their
// statuses to podsync.
func newProvider(ctx context.Context, o *options, nodeIP string, client kubernetes.Interface, pods *podsync.Controller, inf *nodeInformers,
	rt *runtime.Runtime, spec *podspec.Runtime, events provider.Recorder, nd *node.Node, reg *provider.Registry) *provider.Provider {
	backoff := lifecycle.DefaultBackoff
	backoff.Max = o.maxRestartPeriod
	return provider.New(ctx, provider.Config{
		NodeIPs: []string{nodeIP}, RootDir: o.rootDir, PodLogsDir: o.podLogsDir, Backoff: backoff,
		Client: client, Statuses: pods.Statuses(), Pods: inf.pods.Lister(), PodsSynced: inf.pods.Informer().HasSynced,
		Containers: rt, Host: spec, Events: events, Node: nd, Registry: reg,
		TracerProvider: o.tracer,
	})
}

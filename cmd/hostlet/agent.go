package main

import (
	"context"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/utils/ptr"

	"github.com/hostlet/hostlet/provider/iptables"
	"github.com/hostlet/hostlet/provider/process"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// agentFlags are the kubelet's settings of the node agent's own process
// and clients, with the kubelet's flag names and defaults.
type agentFlags struct {
	oomScoreAdj         int32
	maxOpenFiles        int64
	contentType         string
	contentionProfiling bool
	syncFrequency       time.Duration
	podCIDR             string
	// makeIPTablesUtilChains: the kubelet's iptables chains
	// (provider/iptables).
	makeIPTablesUtilChains bool
}

func (a *agentFlags) flags(fs *pflag.FlagSet) {
	fs.Int32Var(&a.oomScoreAdj, "oom-score-adj", -999, "The oom-score-adj value for kubelet process. Values must be within the range [-1000, 1000]")
	fs.Int64Var(&a.maxOpenFiles, "max-open-files", 1000000, "Number of files that can be opened by Kubelet process.")
	fs.StringVar(&a.contentType, "kube-api-content-type", runtime.ContentTypeProtobuf, "Content type of requests sent to apiserver.")
	fs.BoolVar(&a.contentionProfiling, "contention-profiling", false, "Enable block profiling, if profiling is enabled")
	fs.DurationVar(&a.syncFrequency, "sync-frequency", time.Minute, "Max period between synchronizing running containers and config")
	fs.BoolVar(&a.makeIPTablesUtilChains, "make-iptables-util-chains", true, "If true, kubelet will ensure iptables utility rules are present on host.")
	fs.StringVar(&a.podCIDR, "pod-cidr", "", "The CIDR to use for pod IP addresses until the Node has spec.podCIDRs (hostlet's default bridge network's range), as the kubelet hands it to its runtime at start; comma-separated for dual-stack")
}

// applyProcess sets hostlet's own OOM score and file limit, as the kubelet
// does before it runs pods.
func (a *agentFlags) applyProcess() {
	process.Apply(process.Settings{OOMScoreAdj: a.oomScoreAdj, MaxOpenFiles: a.maxOpenFiles})
}

// startIPTablesChains makes the kubelet's iptables utility chains and
// keeps them (makeIPTablesUtilChains), as the kubelet's Run does once its
// node status loop started; nothing of hostlet's own waits for them.
func (a *agentFlags) startIPTablesChains(ctx context.Context) {
	if a.makeIPTablesUtilChains {
		go iptables.Run(ctx, iptables.Present())
	}
}

// setContentType is the kubelet's setContentTypeForClient: requests in
// contentType (protobuf by default, where the API server has it), JSON
// accepted beside protobuf; empty leaves client-go's default.
func setContentType(cfg *rest.Config, contentType string) {
	if contentType == "" {
		return
	}
	cfg.ContentType = contentType
	if contentType == runtime.ContentTypeProtobuf {
		cfg.AcceptContentTypes = strings.Join([]string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON}, ",")
	}
}

// debugFlagsSetter is what /debug/flags/v sets (enableDebugFlagsHandler,
// file only, true by default as the kubelet's): hostlet's log level as -v
// maps it (3 and above debug); nil when the file turns it off.
func (o *options) debugFlagsSetter() func(v uint32) {
	if o.kubeletConfig != nil && !ptr.Deref(o.kubeletConfig.EnableDebugFlagsHandler, true) {
		return nil
	}
	return func(v uint32) {
		level := log.InfoLevel
		if v >= 3 {
			level = log.DebugLevel
		}
		log.SetLevel(level)
		log.WithField("verbosity", v).Info("log verbosity set through /debug/flags/v")
	}
}

// startPodCIDRs are the pod CIDRs the runtime starts with: podCIDR, as the
// kubelet's NewMainKubelet hands it to the runtime (UpdatePodCIDR) before
// the Node's spec.podCIDRs, which replace it once they are set; none
// without it.
func startPodCIDRs(podCIDR string) []string {
	if podCIDR == "" {
		return nil
	}
	return strings.Split(podCIDR, ",")
}

package main

import (
	"context"
	"time"

	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/cri"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
)

// startCRI serves the CRI view of the node's pods on --cri-socket, from
// the provider's pods and the runtime's sandboxes, containers and images.
func startCRI(ctx context.Context, socket string, quota cri.CFSQuota, prov *provider.Provider, rt *runtime.Runtime) {
	if socket == "" {
		return
	}
	if err := cri.Serve(ctx, cri.Config{
		Socket: socket, Pods: prov, Runtime: rt, Images: rt, Network: rt.Network(), CgroupDriver: rt.Cgroups().Driver(),
		CFSQuota: quota,
	}); err != nil {
		// crictl and the agents that list containers through CRI lose
		// their view; pods still run.
		log.WithError(err).WithField("socket", socket).Error("CRI view of the node not served")
		return
	}
	log.WithField("socket", socket).Info("serving the CRI view of the node")
}

// criCFSQuota is how podspec enforces CPU limits (podspec.NewCFSQuota's
// period, none without --cpu-cfs-quota), as the view's sandbox configs say
// it.
func criCFSQuota(o *options) cri.CFSQuota {
	if !o.cpuCFSQuota {
		return cri.CFSQuota{}
	}
	period := uint64(runtime.QuotaPeriod)
	if o.gates.Enabled("CustomCPUCFSQuotaPeriod") {
		period = uint64(o.cpuCFSQuotaPeriod / time.Microsecond)
	}
	return cri.CFSQuota{Period: period}
}

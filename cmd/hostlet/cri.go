package main

import (
	"context"

	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/cri"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
)

// startCRI serves the CRI view of the node's pods on --cri-socket, from
// the provider's pods and the runtime's sandboxes, containers and images.
func startCRI(ctx context.Context, socket string, prov *provider.Provider, rt *runtime.Runtime) {
	if socket == "" {
		return
	}
	if err := cri.Serve(ctx, cri.Config{
		Socket: socket, Pods: prov, Runtime: rt, Images: rt, Network: rt.Network(), CgroupDriver: rt.Cgroups().Driver(),
	}); err != nil {
		// crictl and the agents that list containers through CRI lose
		// their view; pods still run.
		log.WithError(err).WithField("socket", socket).Error("CRI view of the node not served")
		return
	}
	log.WithField("socket", socket).Info("serving the CRI view of the node")
}

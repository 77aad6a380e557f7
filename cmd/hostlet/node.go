package main

import (
	"context"
	"fmt"

	"github.com/hostlet/hostlet/provider/devices"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/featuregate"
)

// nodeConfig is the node as the flags describe it.
func (o *options) nodeConfig(name, nodeIP string) (node.Config, error) {
	taints, err := parseTaints(o.taints)
	if err != nil {
		return node.Config{}, err
	}
	if err := validateNodeLabels(o.nodeLabels); err != nil {
		return node.Config{}, err
	}
	sysctls, err := node.NewSysctlAllowlist(o.allowedUnsafeSysctls)
	if err != nil {
		return node.Config{}, fmt.Errorf("--allowed-unsafe-sysctls: %w", err)
	}
	thresholds, err := node.ParseThresholds(o.evictionHard)
	if err != nil {
		return node.Config{}, fmt.Errorf("--eviction-hard: %w", err)
	}
	if o.cgroupsPerQOS {
		// The pods' cgroup exists: its memory is watched too.
		thresholds = thresholds.WithAllocatable()
	}
	reserved, err := parseResources(o.systemReserved, o.kubeReserved)
	if err != nil {
		return node.Config{}, err
	}
	var declared *node.DeclaredFeatures
	if o.gates != nil && o.gates.Enabled("NodeDeclaredFeatures") {
		// Only gates of behaviour hostlet has count: a feature it lacks is
		// never declared, whatever the gate says.
		has := func(gate string) bool {
			_, ok := hostletGates[gate]
			return ok && o.gates.Enabled(featuregate.Feature(gate))
		}
		if declared, err = node.NewDeclaredFeatures(has, node.KubeletVersion); err != nil {
			return node.Config{}, err
		}
	}
	return node.Config{
		Name: name, InternalIPs: []string{nodeIP}, ExternalIP: o.externalIP,
		Labels: o.nodeLabels, Taints: taints, ProviderID: o.providerID, NoControllerAttachDetach: !o.controllerAttachDetach, MaxPods: o.maxPods, PodsPerCore: int(o.podsPerCore), Reserved: reserved,
		EvictionHard: thresholds, RootDir: o.rootDir, Port: o.port, Version: node.KubeletVersion,
		MaxImages: o.maxImages, DeclaredFeatures: declared, Sysctls: sysctls, NoLocalStorageCapacity: !o.localStorageIsolation,
	}, nil
}

// newNode is the node over what it reads: its Node object in the API, the
// device plugins, the images and the CSI plugin's volumes in use, which
// ask for a status update through requests.
func newNode(ctx context.Context, cfg node.Config, events record.EventRecorder, inf *nodeInformers, heartbeat kubernetes.Interface,
	dm *devices.Manager, rt *runtime.Runtime, csiVolumes *csi.Manager, requests node.StatusRequests) (*node.Node, error) {
	cfg.Events, cfg.Lister, cfg.Informer, cfg.Client = events, inf.node.Lister(), inf.node.Informer(), heartbeat
	cfg.Devices, cfg.Images, cfg.Volumes, cfg.Requests = dm, rt, csiVolumes, requests
	return node.New(ctx, cfg, rt)
}

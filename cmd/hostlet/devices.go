package main

import (
	"context"
	"path/filepath"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/devices"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/podresources"
	"github.com/hostlet/hostlet/provider/staticpod"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
)

// newDevices is the device manager, under the root dir as the kubelet's;
// active are the pods whose devices stay assigned.
func newDevices(rootDir string, active func() ([]*v1.Pod, bool)) (*devices.Manager, error) {
	return devices.New(devices.Config{Dir: filepath.Join(rootDir, "device-plugins"), ActivePods: active})
}

// startDevices serves the device plugin Registration service and the pod
// resources API under the root dir, as the kubelet does under its own.
func startDevices(ctx context.Context, rootDir string, dm *devices.Manager, nd *node.Node, activePods func() ([]*v1.Pod, bool)) error {
	if err := dm.Start(ctx, nd.UpdateStatus); err != nil {
		return err
	}
	active := func() []*v1.Pod {
		pods, _ := activePods()
		return pods
	}
	if err := podresources.Serve(ctx, podresources.Config{
		Socket: filepath.Join(rootDir, "pod-resources", "kubelet.sock"), ActivePods: active, Devices: dm,
	}); err != nil {
		// Monitoring agents lose their view; pods still run.
		log.WithError(err).Error("pod resources API not served")
	}
	return nil
}

// nodePods are the node's pods as the API has them, and its static pods
// (which the static pod manager knows).
type nodePods struct {
	api    coreinformers.PodInformer
	static *staticpod.Manager
}

// active are the node's pods not finished; ok is false until the pod
// cache has synced (nothing is known to be gone yet).
func (n nodePods) active() ([]*v1.Pod, bool) {
	if !n.api.Informer().HasSynced() {
		return nil, false
	}
	all, err := n.api.Lister().List(labels.Everything())
	if err != nil {
		return nil, false
	}
	out := make([]*v1.Pod, 0, len(all))
	for _, p := range all {
		// A mirror pod stands for a static pod, which is counted itself
		// (its UID is the one its containers and devices are known by).
		if !lifecycle.Terminal(p.Status.Phase) && !staticpod.IsMirror(p) {
			out = append(out, p)
		}
	}
	return append(out, n.static.ActivePods()...), true
}

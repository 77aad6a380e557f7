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
)

// startDevices serves the device plugin Registration service and the pod
// resources API under the root dir, as the kubelet does under its own.
func startDevices(ctx context.Context, rootDir string, dm *devices.Manager, nd *node.Node, inf *nodeInformers) error {
	if err := dm.Start(ctx, nd.UpdateStatus); err != nil {
		return err
	}
	active := func() []*v1.Pod {
		pods, _ := inf.activePods()
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

// activePods are the node's pods not finished, as the API has them, and
// its static pods; ok is
// false until the pod cache has synced (nothing is known to be gone yet).
func (i *nodeInformers) activePods() ([]*v1.Pod, bool) {
	if !i.pods.Informer().HasSynced() {
		return nil, false
	}
	all, err := i.pods.Lister().List(labels.Everything())
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
	if i.staticPods != nil {
		out = append(out, i.staticPods()...)
	}
	return out, true
}

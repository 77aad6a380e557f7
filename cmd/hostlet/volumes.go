package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hostlet/hostlet/provider/dra"
	"github.com/hostlet/hostlet/provider/pluginwatcher"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// prepareRootDir makes the root dir, a shared mount as the kubelet's.
func prepareRootDir(rootDir string) error {
	if err := os.MkdirAll(rootDir, 0o750); err != nil {
		return err
	}
	if err := volumes.NewLayout(rootDir).MakeShared(); err != nil {
		return fmt.Errorf("error configuring root directory: %w", err)
	}
	return nil
}

// newCSI is the CSI plugin. The volumes it has in use go into the node's
// status: changed is told when they change; its volume resize events go
// to events. node is the informer on the node's own Node: a volume waiting
// for its attachment is looked at again when the Node lists it attached.
// controllerAttach is enableControllerAttachDetach.
func newCSI(rootDir, nodeName string, controllerAttach bool, client kubernetes.Interface, changed func(), events record.EventRecorder, node csi.NodeInformer) *csi.Manager {
	return csi.New(csi.Config{RootDir: rootDir, NodeName: nodeName, Client: client, Changed: changed, Events: events, Node: node,
		NoControllerAttachDetach: !controllerAttach})
}

// startPlugins starts the CSI plugin and the registration of CSI and DRA
// drivers, which register through the same directory; it returns DRA's
// claims.
func startPlugins(ctx context.Context, rootDir string, client kubernetes.Interface, csiVolumes *csi.Manager) (*dra.Manager, error) {
	claims := dra.New(dra.Config{Client: client, Checkpoint: filepath.Join(rootDir, dra.CheckpointName)})
	csiVolumes.Start(ctx)
	plugins := pluginwatcher.New(volumes.NewLayout(rootDir).PluginsRegistryDir(), map[string]pluginwatcher.Handler{
		registerapi.DRAPlugin: claims, registerapi.CSIPlugin: csiVolumes})
	return claims, plugins.Start(ctx)
}

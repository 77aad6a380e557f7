package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/provider/pluginwatcher"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	csiplugins "k8s.io/csi-translation-lib/plugins"
)

// Register is the plugin watcher's handler of CSI plugins
// (provider/pluginwatcher), as the kubelet's csi RegistrationHandler: a
// 1.x plugin is asked NodeGetInfo, which becomes its entry in the node's
// CSINode (node ID, topology keys, allocatable volume count), the node's
// csi.volume.kubernetes.io/nodeid annotation and its topology labels;
// only then is it registered (a failure refuses it; the registrar tries
// again).
func (m *Manager) Register(ctx context.Context, p pluginwatcher.Plugin) error {
	if err := supportedVersion(p.Versions); err != nil {
		return err
	}
	endpoint := strings.TrimPrefix(p.Endpoint, "unix://")
	if !filepath.IsAbs(endpoint) {
		return fmt.Errorf("endpoint %q is not an absolute path", p.Endpoint)
	}
	conn, err := grpcsock.Dial(endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	info, err := csipb.NewNodeClient(conn).NodeGetInfo(cctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("error during CSI NodeGetInfo() call: %w", err)
	}
	if info.GetNodeId() == "" {
		return fmt.Errorf("error updating CSI node info: node ID is empty")
	}
	// Registered before the objects are written: a pod waiting for it can
	// use it at once, as the kubelet adds it to its driver store first.
	m.mu.Lock()
	m.drivers[p.Name] = driver{endpoint: endpoint, socket: p.Socket}
	m.mu.Unlock()
	if err := m.installDriver(ctx, p.Name, info); err != nil {
		m.mu.Lock()
		delete(m.drivers, p.Name)
		m.mu.Unlock()
		return fmt.Errorf("error updating CSI node info: %w", err)
	}
	log.WithFields(log.Fields{"driver": p.Name, "nodeID": info.GetNodeId(), "endpoint": endpoint}).Info("csi: driver registered")
	go m.retryPending(context.WithoutCancel(ctx))
	go m.unstageLeftOf(context.WithoutCancel(ctx), p.Name)
	return nil
}

// Deregister forgets a driver whose registration socket went away and
// removes its CSINode entry and annotation, as the kubelet does (its
// topology labels stay).
func (m *Manager) Deregister(p pluginwatcher.Plugin) {
	m.mu.Lock()
	d, ok := m.drivers[p.Name]
	if ok && d.socket == p.Socket {
		delete(m.drivers, p.Name)
	}
	m.mu.Unlock()
	if !ok || d.socket != p.Socket {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.uninstallDriver(ctx, p.Name); err != nil {
		log.WithError(err).WithField("driver", p.Name).Warn("csi: removing the driver from the node's CSINode and annotation")
	}
	log.WithField("driver", p.Name).Info("csi: driver deregistered")
}

// initCSINode makes the node's CSINode once the Node exists (it is owned
// by the Node), or corrects its migrated plugins, as the kubelet does at
// start.
func (m *Manager) initCSINode(ctx context.Context) {
	_ = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: 1 << 30},
		func(ctx context.Context) (bool, error) {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cn, err := m.csiNode(ctx)
				if err != nil || !withMigratedPlugins(cn) {
					return err
				}
				_, err = m.cfg.Client.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				log.WithError(err).Debug("csi: CSINode not made yet")
			}
			return err == nil, nil
		})
}

// MigratedPlugins are the in-tree volume plugins whose volumes the node
// serves through their CSI drivers (migrated.go in volumemanager): all
// seven in 1.35, as the kubelet's CSI plugin lists them
// (CSIMigrationPortworx is GA and locked on). The node's CSINode says so in
// its storage.kubernetes.io/migrated-plugins annotation, which the
// attach/detach controller and the scheduler read to treat the node's
// in-tree volumes as the CSI driver's.
var MigratedPlugins = []string{
	csiplugins.AWSEBSInTreePluginName,
	csiplugins.AzureDiskInTreePluginName,
	csiplugins.AzureFileInTreePluginName,
	csiplugins.CinderInTreePluginName,
	csiplugins.GCEPDInTreePluginName,
	csiplugins.PortworxVolumePluginName,
	csiplugins.VSphereInTreePluginName,
}

// withMigratedPlugins sets the CSINode's migrated plugins annotation,
// saying whether it changed (the kubelet's setMigrationAnnotation: the
// same set in any order is no change).
func withMigratedPlugins(cn *storagev1.CSINode) bool {
	old := sets.New[string]()
	if a := cn.Annotations[v1.MigratedPluginsAnnotationKey]; a != "" {
		old.Insert(strings.Split(a, ",")...)
	}
	want := sets.New(MigratedPlugins...)
	if old.Equal(want) {
		return false
	}
	if cn.Annotations == nil {
		cn.Annotations = map[string]string{}
	}
	cn.Annotations[v1.MigratedPluginsAnnotationKey] = strings.Join(sets.List(want), ",")
	return true
}

// csiNode gets the node's CSINode, made (owned by the Node) if missing.
func (m *Manager) csiNode(ctx context.Context) (*storagev1.CSINode, error) {
	api := m.cfg.Client.StorageV1().CSINodes()
	cn, err := api.Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		return cn, err
	}
	node, err := m.cfg.Client.CoreV1().Nodes().Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cn = &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: m.cfg.NodeName, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}},
	}
	withMigratedPlugins(cn)
	cn, err = api.Create(ctx, cn, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return api.Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
	}
	return cn, err
}

// installDriver writes the driver's NodeGetInfo into the Node (annotation,
// topology labels) and its CSINode entry.
func (m *Manager) installDriver(ctx context.Context, name string, info *csipb.NodeGetInfoResponse) error {
	if m.cfg.Client == nil {
		return nil
	}
	if err := m.patchNode(ctx, name, info.GetNodeId(), info.GetAccessibleTopology().GetSegments()); err != nil {
		return err
	}
	entry := storagev1.CSINodeDriver{Name: name, NodeID: info.GetNodeId(), TopologyKeys: topologyKeys(info.GetAccessibleTopology())}
	if n := info.GetMaxVolumesPerNode(); n > 0 {
		c := int32(n)
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: &c}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cn, err := m.csiNode(ctx)
		if err != nil {
			return err
		}
		cn.Spec.Drivers = withDriver(cn.Spec.Drivers, &entry, name)
		withMigratedPlugins(cn)
		_, err = m.cfg.Client.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{})
		return err
	})
}

func (m *Manager) uninstallDriver(ctx context.Context, name string) error {
	if m.cfg.Client == nil {
		return nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cn, err := m.cfg.Client.StorageV1().CSINodes().Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		drivers := withDriver(cn.Spec.Drivers, nil, name)
		if len(drivers) == len(cn.Spec.Drivers) {
			return nil
		}
		cn.Spec.Drivers = drivers
		_, err = m.cfg.Client.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	return m.patchNode(ctx, name, "", nil)
}

// withDriver is drivers with name's entry replaced by entry (removed when
// nil).
func withDriver(drivers []storagev1.CSINodeDriver, entry *storagev1.CSINodeDriver, name string) []storagev1.CSINodeDriver {
	out := []storagev1.CSINodeDriver{}
	for _, d := range drivers {
		if d.Name != name {
			out = append(out, d)
		}
	}
	if entry != nil {
		out = append(out, *entry)
	}
	return out
}

// patchNode sets (nodeID "" removes) the driver's node ID in the node's
// annotation, and adds its topology segments as labels.
func (m *Manager) patchNode(ctx context.Context, name, nodeID string, topology map[string]string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := m.cfg.Client.CoreV1().Nodes().Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ids, err := nodeIDs(node)
		if err != nil {
			return err
		}
		if nodeID == "" {
			delete(ids, name)
		} else {
			ids[name] = nodeID
		}
		meta := map[string]any{"resourceVersion": node.ResourceVersion}
		if len(ids) == 0 {
			meta["annotations"] = map[string]any{nodeIDKey: nil}
		} else {
			b, _ := json.Marshal(ids)
			meta["annotations"] = map[string]any{nodeIDKey: string(b)}
		}
		labels := map[string]any{}
		for k, v := range topology {
			if cur, ok := node.Labels[k]; ok && cur != v {
				return fmt.Errorf("detected topology value collision: driver reported %q:%q but existing label is %q:%q", k, v, k, cur)
			}
			labels[k] = v
		}
		if len(labels) > 0 {
			meta["labels"] = labels
		}
		patch, _ := json.Marshal(map[string]any{"metadata": meta})
		_, err = m.cfg.Client.CoreV1().Nodes().Patch(ctx, m.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// nodeIDs is the node's csi.volume.kubernetes.io/nodeid annotation.
func nodeIDs(node *v1.Node) (map[string]string, error) {
	ids := map[string]string{}
	if s, ok := node.Annotations[nodeIDKey]; ok && s != "" {
		if err := json.Unmarshal([]byte(s), &ids); err != nil {
			return nil, fmt.Errorf("failed to parse node annotation %q: %v", nodeIDKey, err)
		}
	}
	return ids, nil
}

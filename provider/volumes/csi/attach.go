package csi

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// attachWaitTimeout bounds a pod's wait for its volumes' attachment: the
// kubelet's podAttachAndMountTimeout (2 min, offset by 3 s to be told
// apart), after which its sync goes on (fails here: its retry waits again)
// and a deletion is not held behind it.
const attachWaitTimeout = 2*time.Minute + 3*time.Second

// NodeInformer is the informer on the node's own Node object
// (cache.SharedInformer).
type NodeInformer interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	RemoveEventHandler(cache.ResourceEventHandlerRegistration) error
	GetStore() cache.Store
}

// errKubeletAttach is the kubelet 1.35's csiAttacher.Attach on the
// kubelet's own volume host: with enableControllerAttachDetach false its
// reconciler attaches an attachable volume itself (AttachVolume, not the
// wait for the controller's attachment), and the CSI attacher refuses
// that on a node; the volume is never mounted (FailedAttachVolume, the
// attach retried with back-off). A driver whose CSIDriver says
// attachRequired: false, and inline ephemeral volumes, are not attached
// and mount as with the controller.
var errKubeletAttach = errors.New("attaching volumes from the kubelet is not supported")

// kubeletAttach is the attach of a volume not set up yet on a node
// without the attach/detach controller: the kubelet's failure, its
// operation named as its event names it; nil with the controller (the
// attachment is waited for).
func (m *Manager) kubeletAttach() error {
	if !m.cfg.NoControllerAttachDetach {
		return nil
	}
	return &Failure{Op: "AttachVolume.Attach", Err: errKubeletAttach}
}

// awaitAttach waits until the attach/detach controller lists the volume
// in the Node's status.volumesAttached, which it does right after the
// VolumeAttachment says attached, as the kubelet's reconciler waits for
// that listing (VerifyControllerAttachedVolume) before it mounts: the
// pod's volume is set up as the attach lands rather than at its next
// sandbox retry, up to 8 s later. It is woken by the Node's changes (the
// Node authorizer lets a node get VolumeAttachments, not watch them).
//
// It takes no lock of the volume's (it only reads the API), so another
// pod's teardown of the volume is never held behind it; the caller checks
// the VolumeAttachment under the lock after it, as without the wait. So it
// returns no error: it returns when the Node lists the volume, when the
// VolumeAttachment says attached or failed already (read once, for a
// Node cache not filled yet; the attacher's error is told at once), at the
// pod's ctx's end (its deletion), or after attachWaitTimeout.
func (m *Manager) awaitAttach(ctx context.Context, v volume) {
	if m.cfg.Node == nil || m.cfg.Client == nil {
		return
	}
	name := UniqueName(v.driver, v.handle)
	// Taken before each look: a change after it wakes the wait.
	changed := m.attachedChanges.wait()
	if m.nodeLists(name) {
		return
	}
	va, err := m.cfg.Client.StorageV1().VolumeAttachments().Get(ctx, AttachmentName(v.handle, v.driver, m.cfg.NodeName), metav1.GetOptions{})
	// Not made yet (the attach/detach controller makes it once it sees
	// the pod): waited for. The node is forbidden to get it then, as the
	// Node authorizer's graph has no edge to it yet.
	notYet := apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
	if (err != nil && !notYet) || (err == nil && (va.Status.Attached || va.Status.AttachError != nil)) {
		return
	}
	timeout := m.clock.NewTimer(attachWaitTimeout)
	defer timeout.Stop()
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-timeout.C():
			log.WithFields(log.Fields{"driver": v.driver, "volume": v.handle}).Warnf("csi: volume not attached after %v", attachWaitTimeout)
			return
		}
		changed = m.attachedChanges.wait()
		if m.nodeLists(name) {
			return
		}
	}
}

// nodeLists says whether the Node's status.volumesAttached lists the
// volume.
func (m *Manager) nodeLists(name v1.UniqueVolumeName) bool {
	obj, ok, err := m.cfg.Node.GetStore().GetByKey(m.cfg.NodeName)
	if err != nil || !ok {
		return false
	}
	n, ok := obj.(*v1.Node)
	return ok && listsAttached(n, name)
}

func listsAttached(n *v1.Node, name v1.UniqueVolumeName) bool {
	return slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == name })
}

// watchNode wakes the pods waiting for their volumes' attachment when the
// Node's volumesAttached change (only then: the node's own status
// updates wake nobody).
func (m *Manager) watchNode(ctx context.Context) (cache.ResourceEventHandlerRegistration, error) {
	reg, err := m.cfg.Node.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { m.attachedChanges.notify() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if !ok1 || !ok2 || !slices.Equal(o.Status.VolumesAttached, n.Status.VolumesAttached) {
				m.attachedChanges.notify()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		_ = m.cfg.Node.RemoveEventHandler(reg)
	}()
	return reg, nil
}

// broadcast wakes every waiter at once: wait's channel closes at the next
// notify.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

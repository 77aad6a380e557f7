package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/moby/sys/mountinfo"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// csiTimeout bounds one CSI call, as the kubelet's csiTimeout.
const csiTimeout = 2 * time.Minute

// Config is what the CSI plugin needs of the node.
type Config struct {
	RootDir  string
	NodeName string
	// Client reads CSIDrivers and VolumeAttachments and writes the
	// node's CSINode and annotation (the node's client).
	Client kubernetes.Interface
	// Changed, if set, is called when the volumes in use change (the node
	// status reports them).
	Changed func()
	// Events, if set, gets the kubelet's volume resize events.
	Events record.EventRecorder
	// Node, if set, is the informer on the node's own Node object: a
	// pod's volume not attached yet is waited for, before its lock is
	// taken, until the Node's status.volumesAttached lists it (attach.go).
	// Without it the pod's retry asks again.
	Node NodeInformer
	// NoControllerAttachDetach is enableControllerAttachDetach: false:
	// no attach/detach controller attaches the node's volumes, and the
	// node does not either, as the kubelet 1.35's CSI attacher refuses to
	// from the kubelet (attach.go).
	NoControllerAttachDetach bool
}

// driver is a registered CSI node plugin.
type driver struct {
	endpoint string
	socket   string // its registration socket
}

// Manager is the CSI plugin of the node.
type Manager struct {
	cfg    Config
	layout volumes.Layout

	csiDrivers storagelisters.CSIDriverLister
	synced     cache.InformerSynced

	mu      sync.Mutex
	drivers map[string]driver
	// inUse are the pods' attachable volumes (the node's volumesInUse).
	inUse map[types.UID]map[v1.UniqueVolumeName]bool
	// pending are pods whose teardown failed (a driver not registered
	// yet, after a restart say): tried again when a driver registers, as
	// the kubelet's reconciler keeps trying, rather than at the next sweep.
	pending map[types.UID]bool
	// pods are the pods' published volumes, by the pod's volume name,
	// for their stats.
	pods map[types.UID]map[string]publishedVolume
	// staged are the volumes each pod had NodeStageVolume called for,
	// that may be staged now (success, or an error that is not final:
	// the kubelet's "uncertain" device): TearDownPod unstages those no
	// pod publishes, also when the pod never got to NodePublish, as the
	// kubelet's reconciler unmounts an uncertain device.
	staged map[types.UID]map[string]volData

	// mounted says whether a path is a mount point (mountinfo.Mounted).
	mounted func(string) (bool, error)
	// unstaging are the volumes whose NodeUnstageVolume failed once no
	// pod used them, retried with back-off (unstage.go).
	unstaging map[string]bool
	tokens    *tokenCache
	clock     clock.Clock
	// exp are the claims of published volumes, for online expansion.
	exp expansions
	// attachedChanges wakes the pods waiting for their volumes'
	// attachment (attach.go).
	attachedChanges broadcast

	// volumeLocks serialize the operations on one volume (driver and
	// handle), as the kubelet's nested pending operations do: a pod's
	// unstage never runs between another's stage and publish.
	volumeLocks sync.Map // string -> *sync.Mutex
}

// lockVolume locks one volume's operations and returns the unlock.
func (m *Manager) lockVolume(driver, handle string) func() {
	mu, _ := m.volumeLocks.LoadOrStore(driver+"^"+handle, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// New is the CSI plugin; Start runs its CSIDriver informer (before it,
// every driver is taken as having no CSIDriver object).
func New(cfg Config) *Manager {
	return &Manager{cfg: cfg, layout: volumes.NewLayout(cfg.RootDir), drivers: map[string]driver{},
		mounted: mountinfo.Mounted, tokens: &tokenCache{clock: clock.RealClock{}}, clock: clock.RealClock{}, exp: newExpansions(),
		inUse: map[types.UID]map[v1.UniqueVolumeName]bool{}, pending: map[types.UID]bool{},
		pods: map[types.UID]map[string]publishedVolume{}, staged: map[types.UID]map[string]volData{}, unstaging: map[string]bool{}}
}

// Start runs the CSIDriver informer and makes the node's CSINode object
// (as the kubelet's InitializeCSINodeWithAnnotation) once the Node exists.
func (m *Manager) Start(ctx context.Context) {
	if m.cfg.Client == nil {
		return
	}
	f := informers.NewSharedInformerFactory(m.cfg.Client, 0)
	inf := f.Storage().V1().CSIDrivers()
	m.csiDrivers, m.synced = inf.Lister(), inf.Informer().HasSynced
	f.Start(ctx.Done())
	if m.cfg.Node != nil {
		if _, err := m.watchNode(ctx); err != nil {
			log.WithError(err).Warn("csi: no handler on the Node; a volume not attached yet waits for its pod's retry")
		}
	}
	go m.initCSINode(ctx)
	go m.runExpansions(ctx)
}

// csiDriver is the driver's CSIDriver object, nil when there is none.
func (m *Manager) csiDriver(name string) (*storagev1.CSIDriver, error) {
	if m.csiDrivers == nil {
		return nil, nil
	}
	if m.synced != nil && !m.synced() {
		return nil, errors.New("CSIDriver informer not synced yet")
	}
	d, err := m.csiDrivers.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return d, err
}

// conn dials a registered driver's endpoint; errDriver says it is not
// registered in the kubelet's words.
func (m *Manager) conn(name string) (*grpc.ClientConn, error) {
	m.mu.Lock()
	d, ok := m.drivers[name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	return grpcsock.Dial(strings.TrimPrefix(d.endpoint, "unix://"))
}

// volume is one CSI volume of a pod as SetUp publishes it.
type volume struct {
	podVolume string // the pod's name for it
	pvc       string // its claim's name (a PV's)
	specName  string // the PV's name or the inline volume's
	driver    string
	handle    string
	ephemeral bool
	readOnly  bool
	fsType    string
	pv        *v1.PersistentVolume // nil for an inline volume
	attrs     map[string]string
	options   []string
	// stageSecret and publishSecret are the secrets NodeStage and
	// NodePublish are given, if any.
	stageSecret, publishSecret *v1.SecretReference
	// block: a block PV (volumeMode: Block), mapped by SetUpBlock.
	block bool
}

// SetUpPV publishes the pod's PersistentVolume with a csi source, the
// pod's volume volName of claim, and returns where the containers mount it
// from and whether the kubelet applies the pod's fsGroup to it; published
// already, it is expanded if its claim waits for the node. readOnly is the pod's claim's, as the
// kubelet's spec.ReadOnly (the PV source's readOnly is for
// ControllerPublish, the attacher's business).
func (m *Manager) SetUpPV(ctx context.Context, pod *v1.Pod, volName, claim string, pv *v1.PersistentVolume, readOnly bool) (string, bool, error) {
	src := pv.Spec.CSI
	return m.setUp(ctx, pod, volume{podVolume: volName, pvc: claim, specName: pv.Name, driver: src.Driver, handle: src.VolumeHandle,
		readOnly: readOnly, fsType: src.FSType, pv: pv, attrs: src.VolumeAttributes,
		options: volumes.MountOptions(pv), stageSecret: src.NodeStageSecretRef, publishSecret: src.NodePublishSecretRef})
}

// SetUpInline publishes the pod's inline ephemeral CSI volume.
func (m *Manager) SetUpInline(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, bool, error) {
	src := vol.CSI
	v := volume{podVolume: vol.Name, specName: vol.Name, driver: src.Driver, handle: InlineHandle(pod.UID, vol.Name), ephemeral: true,
		readOnly: src.ReadOnly != nil && *src.ReadOnly, attrs: src.VolumeAttributes}
	if src.FSType != nil {
		v.fsType = *src.FSType
	}
	if src.NodePublishSecretRef != nil {
		// An inline volume's secret is the pod's namespace's.
		v.publishSecret = &v1.SecretReference{Namespace: pod.Namespace, Name: src.NodePublishSecretRef.Name}
	}
	return m.setUp(ctx, pod, v)
}

// Failure is a volume that could not be set up, with the prefix of the
// kubelet's FailedMount message ("MountVolume.SetUp failed").
type Failure struct {
	Op  string
	Err error
}

func (f *Failure) Error() string { return f.Op + " failed: " + f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// setUp is the kubelet's operation for a CSI volume: WaitForAttach (an
// attachable driver's VolumeAttachment attached), MountDevice
// (NodeStageVolume to the global path when the driver stages), SetUp
// (NodePublishVolume to the pod's path, vol_data.json first). A volume
// published already (also by a hostlet before a restart) is left as it is,
// but for an online expansion its claim waits for, and a NodePublish again
// if its driver requiresRepublish.
//
// The wait for the attachment comes first, without the volume's lock (it
// only reads the API): another pod's teardown of the same volume is not
// held behind it. Under the lock the attachment is checked again, as
// before.
func (m *Manager) setUp(ctx context.Context, pod *v1.Pod, v volume) (string, bool, error) {
	target := TargetPath(m.layout, pod.UID, v.specName)
	setupErr := func(err error) error {
		return &Failure{Op: "MountVolume.SetUp", Err: fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to %w", err)}
	}
	cd, err := m.csiDriver(v.driver)
	if err != nil {
		return "", false, setupErr(fmt.Errorf("get CSIDriver: %w", err))
	}
	mode := storagev1.VolumeLifecyclePersistent
	if v.ephemeral {
		mode = storagev1.VolumeLifecycleEphemeral
	}
	if err := lifecycleModeAllowed(v.driver, cd, mode); err != nil {
		// The kubelet's text, "SetupAt" and all.
		return "", false, &Failure{Op: "MountVolume.SetUp", Err: fmt.Errorf("kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: %w", err)}
	}
	var fsPolicy *storagev1.FSGroupPolicy
	if cd != nil {
		fsPolicy = cd.Spec.FSGroupPolicy
	}
	attachable := !v.ephemeral && attachRequired(cd)
	if attachable {
		// In use before the wait, as the kubelet reports a volume in
		// use before it verifies the attachment.
		m.markInUse(pod.UID, UniqueName(v.driver, v.handle))
		if ok, err := m.mounted(target); err != nil || !ok {
			if err := m.kubeletAttach(); err != nil {
				return "", false, err
			}
			m.awaitAttach(ctx, v)
		}
	} else if !v.ephemeral {
		// Its CSIDriver says no attach any more (one made after the
		// pod): the volume leaves volumesInUse, so the attach/detach
		// controller deletes the VolumeAttachment an earlier attempt
		// made at once, not after its 6-minute unmount wait.
		m.unmarkInUse(pod.UID, UniqueName(v.driver, v.handle))
	}
	defer m.lockVolume(v.driver, v.handle)()
	// Published already (also by a hostlet before a restart): only a
	// driver that requiresRepublish is called again, NodePublish only, as
	// the kubelet's remount.
	remount := false
	if ok, err := m.mounted(target); err == nil && ok {
		m.published(pod.UID, v, target)
		// Online expansion follows the claim (expansions.go); an
		// unwatched claim is looked at now, as the kubelet's resync does.
		m.trackClaim(pod, v, target)
		if !requiresRepublish(cd) {
			return target, false, nil
		}
		remount = true
	}
	var publishContext map[string]string
	if attachable {
		publishContext, err = m.waitForAttach(ctx, v)
		if err != nil {
			return "", false, &Failure{Op: "MountVolume.WaitForAttach", Err: err}
		}
	}
	conn, err := m.conn(v.driver)
	if err != nil {
		if v.ephemeral {
			return "", false, setupErr(fmt.Errorf("get CSI client: %w", err))
		}
		return "", false, &Failure{Op: "MountVolume.MountDevice", Err: fmt.Errorf("kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: %w", err)}
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := node.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return "", false, setupErr(fmt.Errorf("get node capabilities: %w", err))
	}
	am := v1.ReadWriteOnce
	if v.pv != nil && len(v.pv.Spec.AccessModes) > 0 {
		am = v.pv.Spec.AccessModes[0]
	}
	mountVolume := &csipb.VolumeCapability_MountVolume{FsType: v.fsType, MountFlags: v.options}
	// A driver with VOLUME_MOUNT_GROUP applies the pod's fsGroup itself.
	mountGroup := hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP)
	if fsGroup := podFSGroup(pod); mountGroup && fsGroup != nil {
		mountVolume.VolumeMountGroup = strconv.FormatInt(*fsGroup, 10)
	}
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: mountVolume},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(am, hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER))},
	}
	staging := ""
	if !v.ephemeral && hasNodeCap(caps.GetCapabilities(), csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		staging = StagingPath(m.layout, v.driver, v.handle)
	}
	if staging != "" && !remount {
		if err := writeVolData(filepath.Dir(staging), volData{DriverName: v.driver, VolumeHandle: v.handle}); err != nil {
			return "", false, &Failure{Op: "MountVolume.MountDevice", Err: err}
		}
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return "", false, &Failure{Op: "MountVolume.MountDevice", Err: err}
		}
		secrets, err := m.secret(ctx, v.stageSecret)
		if err != nil {
			return "", false, &Failure{Op: "MountVolume.MountDevice", Err: fmt.Errorf("fetching NodeStageSecretRef %s/%s failed: %v",
				v.stageSecret.Namespace, v.stageSecret.Name, err)}
		}
		m.markStaged(pod.UID, volData{DriverName: v.driver, VolumeHandle: v.handle})
		if _, err := node.NodeStageVolume(cctx, &csipb.NodeStageVolumeRequest{
			VolumeId: v.handle, PublishContext: publishContext, StagingTargetPath: staging,
			VolumeCapability: capability, VolumeContext: v.attrs, Secrets: secrets,
		}); err != nil {
			if isFinalError(err) {
				// The driver says it did not stage it: nothing to
				// unstage, the staging directory goes (the kubelet's
				// MountDevice cleanup after a finished operation).
				m.unmarkStaged(pod.UID, v.driver, v.handle)
				m.removeStagingDir(staging)
			}
			return "", false, &Failure{Op: "MountVolume.MountDevice", Err: fmt.Errorf("rpc error: NodeStageVolume: %w", err)}
		}
	}
	secrets, err := m.secret(ctx, v.publishSecret)
	if err != nil {
		return "", false, setupErr(fmt.Errorf("fetch NodePublishSecretRef %s/%s: %v", v.publishSecret.Namespace, v.publishSecret.Name, err))
	}
	attrs := v.attrs
	if podInfoOnMount(cd) {
		attrs = mergeMap(attrs, podInfo(pod, v.ephemeral))
	}
	tokens, inSecrets, err := m.tokenAttrs(ctx, pod, cd)
	if err != nil {
		return "", false, setupErr(fmt.Errorf("get service accoount token attributes: %w", err))
	}
	if inSecrets {
		secrets = mergeMap(secrets, tokens)
	} else if tokens != nil {
		attrs = mergeMap(attrs, tokens)
	}
	dir := filepath.Dir(target)
	lm := lifecyclePers
	if v.ephemeral {
		lm = lifecycleEph
	}
	if err := writeVolData(dir, volData{SpecVolID: v.specName, VolumeHandle: v.handle, DriverName: v.driver,
		NodeName: m.cfg.NodeName, AttachmentID: AttachmentName(v.handle, v.driver, m.cfg.NodeName), VolumeLifecycleMode: lm}); err != nil {
		return "", false, setupErr(fmt.Errorf("save volume info data: %w", err))
	}
	if _, err := node.NodePublishVolume(cctx, &csipb.NodePublishVolumeRequest{
		VolumeId: v.handle, PublishContext: publishContext, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: capability, Readonly: v.readOnly, VolumeContext: attrs, Secrets: secrets,
	}); err != nil {
		return "", false, &Failure{Op: "MountVolume.SetUp", Err: fmt.Errorf("rpc error: NodePublishVolume: %w", err)}
	}
	m.published(pod.UID, v, target)
	m.trackClaim(pod, v, target)
	return target, !remount && !mountGroup && fsGroupApplies(fsPolicy, v.fsType, v.pv, v.readOnly), nil
}

// secret is the data of a secret a CSI call is given (nil ref: none),
// read with the node's credentials as the kubelet reads it (the node
// authorizer allows the secrets its pods' volumes name).
func (m *Manager) secret(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	if m.cfg.Client == nil {
		return nil, errors.New("no API client to read secrets with")
	}
	s, err := m.cfg.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// podFSGroup is the pod's fsGroup, if it has one.
func podFSGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// waitForAttach is the kubelet's WaitForAttach: the volume's
// VolumeAttachment must say attached (read once, under the volume's lock,
// after awaitAttach); the pod's retry asks again.
func (m *Manager) waitForAttach(ctx context.Context, v volume) (map[string]string, error) {
	name := AttachmentName(v.handle, v.driver, m.cfg.NodeName)
	if m.cfg.Client == nil {
		return nil, errors.New("no API client to read VolumeAttachments with")
	}
	va, err := m.cfg.Client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("volume %v has GET error for volume attachment %v: %v", v.handle, name, err)
	}
	if va.Status.AttachError != nil {
		return nil, errors.New(va.Status.AttachError.Message)
	}
	if !va.Status.Attached {
		return nil, fmt.Errorf("volume %v is not attached for volume attachment %v", v.handle, name)
	}
	return va.Status.AttachmentMetadata, nil
}

func (m *Manager) markInUse(uid types.UID, name v1.UniqueVolumeName) {
	m.mu.Lock()
	if m.inUse[uid] == nil {
		m.inUse[uid] = map[v1.UniqueVolumeName]bool{}
	}
	added := !m.inUse[uid][name]
	m.inUse[uid][name] = true
	m.mu.Unlock()
	if added && m.cfg.Changed != nil {
		m.cfg.Changed()
	}
}

func (m *Manager) unmarkInUse(uid types.UID, name v1.UniqueVolumeName) {
	m.mu.Lock()
	removed := m.inUse[uid][name]
	delete(m.inUse[uid], name)
	m.mu.Unlock()
	if removed && m.cfg.Changed != nil {
		m.cfg.Changed()
	}
}

// VolumesInUse are the attachable CSI volumes pods on the node use, from
// the decision to set one up until it is torn down (the node status's
// volumesInUse, which the attach/detach controller waits on to detach).
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []v1.UniqueVolumeName
	for _, vs := range m.inUse {
		for n := range vs {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TearDownPod unpublishes the pod's CSI volumes, and unstages those no
// other pod uses, as the kubelet's UnmountVolume and UnmountDevice, from
// what vol_data.json says: also a pod set up by a hostlet before a
// restart. Each volume's directory goes once it is unpublished; an error
// (a driver not registered, or failing) leaves the rest in place for the
// next try, so the pod's directory is not removed under a mount.
func (m *Manager) TearDownPod(ctx context.Context, uid types.UID) error {
	var errs []error
	// Block volumes first: they have no directory under volumes/.
	if err := m.tearDownBlock(ctx, uid); err != nil {
		errs = append(errs, err)
	}
	base := filepath.Dir(VolumeDir(m.layout, uid, "x"))
	entries, err := os.ReadDir(base)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errors.Join(append(errs, err)...)
	}
	for _, e := range entries {
		if err := m.tearDown(ctx, uid, filepath.Join(base, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("UnmountVolume.TearDown failed for volume %q (pod %q): %w", e.Name(), uid, err))
		}
	}
	if len(errs) == 0 {
		if err := m.unstageStaged(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.Lock()
	if len(errs) == 0 {
		delete(m.pending, uid)
	} else {
		m.pending[uid] = true
	}
	m.mu.Unlock()
	if len(errs) == 0 {
		if entries != nil {
			_ = os.Remove(base)
		}
		m.forgetPod(uid)
		m.tokens.forget(string(uid) + "/")
	}
	return errors.Join(errs...)
}

// retryPending tears down again the volumes of pods whose teardown
// failed; the rest of their directories goes with the next cleanup.
func (m *Manager) retryPending(ctx context.Context) {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.pending))
	for uid := range m.pending {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		if err := m.TearDownPod(ctx, uid); err != nil {
			log.WithError(err).WithField("uid", uid).Info("csi: volumes of a pod gone still not torn down")
		}
	}
}

func (m *Manager) forgetPod(uid types.UID) {
	m.mu.Lock()
	_, had := m.inUse[uid]
	delete(m.inUse, uid)
	delete(m.pods, uid)
	delete(m.staged, uid)
	m.mu.Unlock()
	m.untrackPod(uid)
	if had && m.cfg.Changed != nil {
		m.cfg.Changed()
	}
}

func (m *Manager) tearDown(ctx context.Context, uid types.UID, dir string) (err error) {
	target := filepath.Join(dir, mountDir)
	d, err := readVolData(dir)
	if err != nil {
		// Never published (the pod failed before vol_data.json was
		// written): nothing of a driver's to undo unless it is mounted.
		if ok, merr := mountinfo.Mounted(target); merr == nil && ok {
			return fmt.Errorf("mounted, but %w", err)
		}
		return os.RemoveAll(dir)
	}
	defer func() { err = namingDriver(err, d) }()
	defer m.lockVolume(d.DriverName, d.VolumeHandle)()
	conn, err := m.conn(d.DriverName)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: Unmounter.TearDownAt failed to get CSI client: %w", err)
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	if _, err := node.NodeUnpublishVolume(cctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: d.VolumeHandle, TargetPath: target}); err != nil {
		return fmt.Errorf("kubernetes.io/csi: Unmounter.TearDownAt failed: rpc error: NodeUnpublishVolume: %w", err)
	}
	// The kubelet removes what the driver left: the target only once it is
	// not a mount point, never reaching through one.
	if ok, err := mountinfo.Mounted(target); err == nil && ok {
		return fmt.Errorf("%s is still mounted after NodeUnpublishVolume", target)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Remove(filepath.Join(dir, volDataFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	log.WithFields(log.Fields{"uid": uid, "driver": d.DriverName, "volume": d.VolumeHandle}).Info("csi: volume unpublished")
	if d.VolumeLifecycleMode == lifecycleEph {
		return nil
	}
	if err := m.unstageUnused(cctx, node, d, uid); err != nil {
		// The pod is done with it: unstaging is the node's business
		// (retried), not the pod's (unstage.go).
		m.unstageLater(uid, d, err)
	}
	return nil
}

// unstageUnused unstages a staged volume no other pod on the node has
// published (the kubelet's UnmountDevice once the last pod is gone).
func (m *Manager) unstageUnused(ctx context.Context, node csipb.NodeClient, d volData, gone types.UID) error {
	staging := StagingPath(m.layout, d.DriverName, d.VolumeHandle)
	if _, err := os.Stat(filepath.Join(filepath.Dir(staging), volDataFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if m.publishedElsewhere(d, gone) {
		return nil
	}
	if _, err := node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: d.VolumeHandle, StagingTargetPath: staging}); err != nil {
		return fmt.Errorf("kubernetes.io/csi: attacher.UnmountDevice failed: rpc error: NodeUnstageVolume: %w", err)
	}
	if ok, err := mountinfo.Mounted(staging); err == nil && ok {
		return fmt.Errorf("%s is still mounted after NodeUnstageVolume", staging)
	}
	if err := removeStaging(staging); err != nil {
		return err
	}
	log.WithFields(log.Fields{"driver": d.DriverName, "volume": d.VolumeHandle}).Info("csi: volume unstaged")
	return nil
}

// publishedElsewhere: another pod's CSI volume directory has the same
// driver's volume.
func (m *Manager) publishedElsewhere(d volData, gone types.UID) bool {
	pods, err := os.ReadDir(m.layout.PodsDir())
	if err != nil {
		return false
	}
	for _, p := range pods {
		uid := types.UID(p.Name())
		if uid == gone {
			continue
		}
		base := filepath.Dir(VolumeDir(m.layout, uid, "x"))
		vols, _ := os.ReadDir(base)
		for _, v := range vols {
			if o, err := readVolData(filepath.Join(base, v.Name())); err == nil && o.DriverName == d.DriverName && o.VolumeHandle == d.VolumeHandle {
				return true
			}
		}
	}
	return false
}

// namingDriver names the driver and volume handle in a teardown's error:
// what an operator needs to find the driver that did not answer.
func namingDriver(err error, d volData) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (driver %s, volume handle %s)", err, d.DriverName, d.VolumeHandle)
}

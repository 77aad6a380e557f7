// Package node is hostlet's Node: its object and status from host signals,
// the Lease, admission of pods against it, and graceful shutdown.
package node

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
)

// KubeletVersion is the Kubernetes version whose kubelet hostlet implements.
const KubeletVersion = "v1.35.4"

// Config describes the node hostlet registers.
type Config struct {
	Name        string
	InternalIPs []string
	ExternalIP  string
	Labels      map[string]string
	Taints      []v1.Taint
	MaxPods     int
	// ProviderID is the Node's spec.providerID when it registers (the
	// kubelet's providerID; "" leaves it to the cloud controller manager).
	ProviderID string
	// NoControllerAttachDetach is enableControllerAttachDetach: false: the
	// Node is registered without the controller-managed-attach-detach
	// annotation (removed from a Node registered with it), so the
	// attach/detach controller leaves its volumes to the node, as the
	// kubelet's initialNode and reconcileCMADAnnotationWithExistingNode.
	NoControllerAttachDetach bool
	// PodsPerCore, if > 0, caps the pods at that many per CPU (the
	// kubelet's podsPerCore; maxPods still bounds them).
	PodsPerCore  int
	Reserved     v1.ResourceList // system-reserved + kube-reserved
	EvictionHard Thresholds
	// NoLocalStorageCapacity is localStorageCapacityIsolation: false: no
	// ephemeral-storage in the capacity or allocatable.
	NoLocalStorageCapacity bool
	RootDir                string
	Port                   int32
	// Sysctls admits pods' sysctls (nil: the safe ones only).
	Sysctls *SysctlAllowlist
	Version string
	// Events receives the node's events (NodeReady, NodeHasDiskPressure, ...).
	Events record.EventRecorder
	// Lister, if set, serves the Node as the cluster has it, for admission
	// and for the status check against it.
	Lister corelisters.NodeLister
	// Informer, if set, is the one behind Lister: a change of the Node by
	// someone else is put right at once rather than at the next check.
	Informer cache.SharedInformer
	// Client writes corrections of the Node status (the heartbeat client,
	// whose timeout bounds each write).
	Client kubernetes.Interface
	// Devices, if set, adds the device plugins' resources and assigns
	// their devices at admission.
	Devices Devices
	// Images, if set, lists the images for status.images, the largest
	// MaxImages of them (nodeStatusMaxImages: -1 all, 0 none).
	Images    Images
	MaxImages int32
	// Volumes, if set, says which attachable volumes the node's pods use
	// (status.volumesInUse); call UpdateStatus (or Requests.Request) when
	// that changes.
	Volumes Volumes
	// Requests, if set, are the node's status re-evaluation requests
	// (UpdateStatus): made before the node, they let a part the node reads
	// (Volumes) ask for one without waiting for the node to exist.
	Requests StatusRequests
	// DeclaredFeatures, if set (the NodeDeclaredFeatures gate), fills
	// status.declaredFeatures and refuses pods needing features it lacks.
	DeclaredFeatures *DeclaredFeatures
}

// StatusRequests asks a node to re-evaluate its status now rather than at
// the next interval. Requests not yet served fold into one.
type StatusRequests chan struct{}

// NewStatusRequests makes the requests for Config.Requests.
func NewStatusRequests() StatusRequests { return make(StatusRequests, 1) }

// Request asks for a status re-evaluation.
func (r StatusRequests) Request() {
	select {
	case r <- struct{}{}:
	default:
	}
}

// Volumes is the node's CSI plugin (provider/volumes/csi.Manager).
type Volumes interface {
	VolumesInUse() []v1.UniqueVolumeName
}

// Node is hostlet's node: its object, its conditions from real host signals,
// and admission against its allocatable. It implements virtual-kubelet's
// NodeProvider.
type Node struct {
	cfg Config
	rt  Runtime

	mu           sync.Mutex
	node         *v1.Node
	notify       func(*v1.Node)
	shuttingDown bool
	imageFs      string // containerd's snapshotter root, once known
	// pressure, once set, says which pressure conditions are on.
	pressure Pressure
	// apiChanged is kicked by every change of the Node in the API.
	apiChanged chan struct{}
	// statusNow is kicked by UpdateStatus.
	statusNow StatusRequests
}

// Pressure is the eviction manager's view of the node's pressure
// conditions (eviction.Manager), which the kubelet's status reads too.
type Pressure interface {
	UnderPressure(c v1.NodeConditionType) bool
}

// SetPressure has the node's pressure conditions follow p: the eviction
// manager is made after the node, whose signals it observes. Until then
// none is on.
func (n *Node) SetPressure(p Pressure) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pressure = p
}

// Runtime is what the node reads of the container runtime.
type Runtime interface {
	Healthy(ctx context.Context) error
	Version(ctx context.Context) (string, error)
	Network() *runtime.Network
	ImageFsDir(ctx context.Context) (string, error)
	RuntimeHandlers(ctx context.Context) ([]runtime.RuntimeHandler, error)
}

func New(ctx context.Context, cfg Config, rt Runtime) (*Node, error) {
	statusNow := cfg.Requests
	if statusNow == nil {
		statusNow = NewStatusRequests()
	}
	n := &Node{cfg: cfg, rt: rt, apiChanged: make(chan struct{}, 1), statusNow: statusNow}
	if cfg.Informer != nil {
		n.watchAPI(cfg.Informer)
	}
	capacity, err := n.capacity()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	// The kubelet's own labels win over --node-labels, as on re-registration.
	for k, v := range map[string]string{
		v1.LabelHostname:          cfg.Name,
		v1.LabelOSStable:          goruntime.GOOS,
		v1.LabelArchStable:        goruntime.GOARCH,
		"beta.kubernetes.io/os":   goruntime.GOOS,
		"beta.kubernetes.io/arch": goruntime.GOARCH,
	} {
		labels[k] = v
	}
	allocatable := n.allocatableFrom(capacity)
	n.withDevices(capacity, allocatable)
	// The TTL annotation belongs to the TTL controller, not the kubelet.
	annotations := map[string]string{}
	if cfg.NoControllerAttachDetach {
		log.Info("Controller attach/detach is disabled for this node; Kubelet will attach and detach volumes")
	} else {
		annotations[ControllerManagedAttachAnnotation] = "true"
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        cfg.Name,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: v1.NodeSpec{Taints: cfg.Taints, ProviderID: cfg.ProviderID},
		Status: v1.NodeStatus{
			Capacity:        capacity,
			Allocatable:     allocatable,
			Addresses:       n.addresses(),
			DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: cfg.Port}},
		},
	}
	health := rt.Healthy(ctx)
	node.Status.NodeInfo = n.nodeInfo(ctx, health)
	// The runtime handlers are left to Run's first round: reading them the
	// first time checks user namespace support by starting a process in
	// one (35 ms of a join's time to Ready, measured), and neither the
	// registration nor Ready needs them.
	node.Status.Features = nodeFeatures()
	node.Status.DeclaredFeatures = cfg.DeclaredFeatures.Names()
	n.node = node
	node.Status.Conditions = n.conditions(ctx, health, nil)
	return n, nil
}

// ControllerManagedAttachAnnotation on a Node says the attach/detach
// controller attaches its volumes (the kubelet's volutil constant).
const ControllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// Object returns a copy of the node as hostlet reports it.
func (n *Node) Object() *v1.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.node.DeepCopy()
}

func (n *Node) Allocatable() v1.ResourceList {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.node.Status.Allocatable.DeepCopy()
}

func (n *Node) Capacity() v1.ResourceList {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.node.Status.Capacity.DeepCopy()
}

// Ref is the node as events name it (the kubelet uses the name as UID).
func (n *Node) Ref() *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: n.cfg.Name, UID: types.UID(n.cfg.Name)}
}

// Ping answers virtual-kubelet's liveness check: hostlet itself is up. The
// runtime's health is reported in the Ready condition instead, so the Lease
// keeps being renewed while containerd is down, as with the kubelet.
func (n *Node) Ping(context.Context) error { return nil }

// NotifyNodeStatus takes virtual-kubelet's callback and hands it the node
// as it is now: the controller was built from an earlier copy, and a change
// in between would otherwise wait for the next report period.
func (n *Node) NotifyNodeStatus(_ context.Context, cb func(*v1.Node)) {
	n.mu.Lock()
	n.notify = cb
	cur := n.node.DeepCopy()
	n.mu.Unlock()
	go cb(cur)
}

// Run re-evaluates the node every interval and reports changes at once;
// each round also checks the Node in the API against it, and so does every
// change of the Node in the API (at most once per reactSpacing).
func (n *Node) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	n.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.refresh(ctx)
		case <-n.statusNow:
			n.refresh(ctx)
		case <-n.apiChanged:
			n.reconcile(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(reactSpacing):
			}
		}
	}
}

func (n *Node) refresh(ctx context.Context) {
	n.mu.Lock()
	prev := n.node.DeepCopy()
	n.mu.Unlock()
	next := prev.DeepCopy()
	if capacity, err := n.capacity(); err == nil {
		next.Status.Capacity = capacity
		next.Status.Allocatable = n.allocatableFrom(capacity)
		n.withDevices(next.Status.Capacity, next.Status.Allocatable)
	}
	// One health check per round: a down containerd costs its timeout once.
	health := n.rt.Healthy(ctx)
	next.Status.NodeInfo = n.nodeInfo(ctx, health)
	next.Status.RuntimeHandlers = n.runtimeHandlers(ctx, health)
	next.Status.Images = n.images(ctx, health)
	next.Status.Features = nodeFeatures()
	next.Status.DeclaredFeatures = n.cfg.DeclaredFeatures.Names()
	next.Status.Conditions = n.conditions(ctx, health, prev.Status.Conditions)
	if n.cfg.Volumes != nil {
		next.Status.VolumesInUse = n.cfg.Volumes.VolumesInUse()
	}
	if equality.Semantic.DeepEqual(withoutHeartbeats(prev.Status), withoutHeartbeats(next.Status)) {
		// Nothing changed here: the Node in the API may have, by someone
		// else's hand.
		n.reconcile(ctx)
		return
	}
	n.mu.Lock()
	n.node = next
	cb := n.notify
	n.mu.Unlock()
	if cb != nil {
		cb(next.DeepCopy())
	}
}

// UpdateStatus has the node re-evaluated now rather than at the next
// interval: a host signal changed (the CNI config, say).
func (n *Node) UpdateStatus() { n.statusNow.Request() }

func withoutHeartbeats(s v1.NodeStatus) v1.NodeStatus {
	s = *s.DeepCopy()
	for i := range s.Conditions {
		s.Conditions[i].LastHeartbeatTime = metav1.Time{}
	}
	return s
}

// SetShuttingDown marks the node as shutting down (graceful node shutdown)
// or, on a cancelled shutdown, as not any more.
func (n *Node) SetShuttingDown(ctx context.Context, on bool) {
	n.mu.Lock()
	n.shuttingDown = on
	n.mu.Unlock()
	n.refresh(ctx)
}

// ShuttingDown reports whether a node shutdown is in progress.
func (n *Node) ShuttingDown() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shuttingDown
}

func (n *Node) capacity() (v1.ResourceList, error) {
	mem, err := memTotal()
	if err != nil {
		return nil, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(n.cfg.RootDir, &fs); err != nil {
		return nil, err
	}
	cpus := goruntime.NumCPU()
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil && set.Count() > 0 {
		cpus = set.Count()
	}
	list := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(cpus), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(fs.Blocks)*fs.Bsize, resource.BinarySI),
		v1.ResourcePods:             *resource.NewQuantity(podCapacity(n.cfg.MaxPods, n.cfg.PodsPerCore, cpus), resource.DecimalSI),
	}
	if n.cfg.NoLocalStorageCapacity {
		// As the kubelet's container manager without local storage
		// isolation: the scheduler and admission then fit no pod that
		// requests ephemeral-storage.
		delete(list, v1.ResourceEphemeralStorage)
	}
	for _, hp := range []struct {
		name string
		kb   int64
	}{{"hugepages-2Mi", 2048}, {"hugepages-1Gi", 1048576}} {
		count := readInt(fmt.Sprintf("/sys/kernel/mm/hugepages/hugepages-%dkB/nr_hugepages", hp.kb))
		list[v1.ResourceName(hp.name)] = *resource.NewQuantity(count*hp.kb*1024, resource.BinarySI)
	}
	return list, nil
}

// podCapacity is the node's pod capacity as the kubelet's MachineInfo
// status setter makes it: maxPods, or podsPerCore per core when that is
// fewer.
func podCapacity(maxPods, podsPerCore, cores int) int64 {
	if podsPerCore > 0 {
		return int64(min(cores*podsPerCore, maxPods))
	}
	return int64(maxPods)
}

// allocatableFrom subtracts reservations and hard eviction thresholds.
func (n *Node) allocatableFrom(capacity v1.ResourceList) v1.ResourceList {
	out := capacity.DeepCopy()
	for _, minus := range []v1.ResourceList{n.cfg.Reserved, n.cfg.EvictionHard.reservation(capacity)} {
		for name, q := range minus {
			if v, ok := out[name]; ok {
				v.Sub(q)
				out[name] = v
			}
		}
	}
	for name, v := range out {
		if v.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, v.Format)
		}
	}
	return out
}

func (n *Node) addresses() []v1.NodeAddress {
	var out []v1.NodeAddress
	for _, ip := range n.cfg.InternalIPs {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	if n.cfg.ExternalIP != "" {
		out = append(out, v1.NodeAddress{Type: v1.NodeExternalIP, Address: n.cfg.ExternalIP})
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: n.cfg.Name})
}

func (n *Node) nodeInfo(ctx context.Context, health error) v1.NodeSystemInfo {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	info := v1.NodeSystemInfo{
		MachineID:       readTrim("/etc/machine-id"),
		SystemUUID:      strings.ToLower(readTrim("/sys/class/dmi/id/product_uuid")),
		BootID:          readTrim("/proc/sys/kernel/random/boot_id"),
		KernelVersion:   unix.ByteSliceToString(uts.Release[:]),
		OSImage:         osImage(),
		OperatingSystem: goruntime.GOOS,
		Architecture:    goruntime.GOARCH,
		KubeletVersion:  n.cfg.Version,
	}
	// The kubelet reports swap (NodeSwap, GA) where the host has some.
	if swap := runtime.SwapCapacity("/proc/meminfo"); swap != 0 {
		info.Swap = &v1.NodeSwapStatus{Capacity: &swap}
	}
	if health == nil {
		if v, err := n.rt.Version(ctx); err == nil {
			info.ContainerRuntimeVersion = v
			return info
		}
	}
	// A runtime that is down keeps the version it last reported.
	n.mu.Lock()
	if n.node != nil {
		info.ContainerRuntimeVersion = n.node.Status.NodeInfo.ContainerRuntimeVersion
	}
	n.mu.Unlock()
	return info
}

// runtimeHandlers are the runtime handlers pods may ask for through a
// RuntimeClass, as the kubelet's RuntimeHandlers setter reports CRI's
// (containerd's runtimes, the default one as ""), read each round: a
// handler added to containerd's config shows once containerd runs with
// it. A runtime that is down keeps the ones it last reported.
func (n *Node) runtimeHandlers(ctx context.Context, health error) []v1.NodeRuntimeHandler {
	if health == nil {
		hs, err := n.rt.RuntimeHandlers(ctx)
		if err == nil {
			return NodeRuntimeHandlers(hs)
		}
		log.WithError(err).Warn("reading the runtime handlers")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node == nil {
		return nil
	}
	return n.node.Status.RuntimeHandlers
}

// nodeFeatures is status.features as the kubelet's NodeFeatures setter
// writes it: supplementalGroupsPolicy true, as hostlet applies Strict
// itself whatever the runtime (the kubelet reports its CRI runtime's
// feature, which containerd has).
func nodeFeatures() *v1.NodeFeatures {
	return &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)}
}

// NodeRuntimeHandlers are handlers as the node status has them.
func NodeRuntimeHandlers(hs []runtime.RuntimeHandler) []v1.NodeRuntimeHandler {
	out := make([]v1.NodeRuntimeHandler, len(hs))
	for i, h := range hs {
		out[i] = v1.NodeRuntimeHandler{Name: h.Name, Features: &v1.NodeRuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: ptr.To(h.RecursiveReadOnlyMounts),
			UserNamespaces:          ptr.To(h.UserNamespaces),
		}}
	}
	return out
}

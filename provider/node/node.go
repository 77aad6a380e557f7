// Package node is hostlet's Node: its object and status from host signals,
// the Lease, admission of pods against it, and graceful shutdown.
package node

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hostlet/hostlet/runtime"
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
)

// KubeletVersion is the Kubernetes version whose kubelet hostlet implements.
const KubeletVersion = "v1.35.4"

// Config describes the node hostlet registers.
type Config struct {
	Name         string
	InternalIPs  []string
	ExternalIP   string
	Labels       map[string]string
	Taints       []v1.Taint
	MaxPods      int
	Reserved     v1.ResourceList // system-reserved + kube-reserved
	EvictionHard Thresholds
	RootDir      string
	Port         int32
	Version      string
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
	// apiChanged is kicked by every change of the Node in the API.
	apiChanged chan struct{}
}

// Runtime is what the node reads of the container runtime.
type Runtime interface {
	Healthy(ctx context.Context) error
	Version(ctx context.Context) (string, error)
	Network() *runtime.Network
	ImageFsDir(ctx context.Context) (string, error)
}

func New(ctx context.Context, cfg Config, rt Runtime) (*Node, error) {
	n := &Node{cfg: cfg, rt: rt, apiChanged: make(chan struct{}, 1)}
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
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   cfg.Name,
			Labels: labels,
			// The TTL annotation belongs to the TTL controller, not the kubelet.
			Annotations: map[string]string{
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: v1.NodeSpec{Taints: cfg.Taints},
		Status: v1.NodeStatus{
			Capacity:        capacity,
			Allocatable:     n.allocatableFrom(capacity),
			Addresses:       n.addresses(),
			DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: cfg.Port}},
		},
	}
	health := rt.Healthy(ctx)
	node.Status.NodeInfo = n.nodeInfo(ctx, health)
	n.node = node
	node.Status.Conditions = n.conditions(ctx, health, nil)
	return n, nil
}

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
	}
	// One health check per round: a down containerd costs its timeout once.
	health := n.rt.Healthy(ctx)
	next.Status.NodeInfo = n.nodeInfo(ctx, health)
	next.Status.Conditions = n.conditions(ctx, health, prev.Status.Conditions)
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
		v1.ResourcePods:             *resource.NewQuantity(int64(n.cfg.MaxPods), resource.DecimalSI),
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

// conditions evaluates the node conditions with the kubelet's reasons,
// keeping transition times of unchanged ones and recording the kubelet's
// node events on transitions. The kubelet sets no NetworkUnavailable
// condition (that is the cloud route controller's or the CNI's), so neither
// does hostlet: a broken CNI shows in Ready.
func (n *Node) conditions(ctx context.Context, health error, prev []v1.NodeCondition) []v1.NodeCondition {
	// Whole seconds, as the API stores them, so times read back compare equal.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	var notReady []string
	if health != nil {
		notReady = append(notReady, "container runtime is down")
	}
	if netErr := n.rt.Network().Status(); netErr != nil {
		notReady = append(notReady, "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: "+netErr.Error())
	}
	if n.ShuttingDown() {
		notReady = append(notReady, "node is shutting down")
	}
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	switch len(notReady) {
	case 0:
	case 1:
		ready = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: notReady[0]}
	default: // the kubelet's aggregated error format
		ready = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "[" + strings.Join(notReady, ", ") + "]"}
	}

	pressure := n.pressure(ctx, health == nil)
	cond := func(t v1.NodeConditionType, okReason, okMsg, badReason, badMsg string) v1.NodeCondition {
		if pressure[t] {
			return v1.NodeCondition{Type: t, Status: v1.ConditionTrue, Reason: badReason, Message: badMsg}
		}
		return v1.NodeCondition{Type: t, Status: v1.ConditionFalse, Reason: okReason, Message: okMsg}
	}
	out := []v1.NodeCondition{
		cond(v1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		cond(v1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"),
		cond(v1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
		ready,
	}
	old := map[v1.NodeConditionType]v1.NodeCondition{}
	for _, c := range prev {
		old[c.Type] = c
	}
	for i := range out {
		out[i].LastHeartbeatTime = now
		if o, ok := old[out[i].Type]; ok && o.Status == out[i].Status {
			out[i].LastTransitionTime = o.LastTransitionTime
			continue
		}
		out[i].LastTransitionTime = now
		n.recordTransition(out[i])
	}
	return out
}

// recordTransition records the kubelet's event for a condition's new status.
func (n *Node) recordTransition(c v1.NodeCondition) {
	if n.cfg.Events == nil {
		return
	}
	event := map[v1.NodeConditionType][2]string{
		v1.NodeMemoryPressure: {"NodeHasSufficientMemory", "NodeHasInsufficientMemory"},
		v1.NodeDiskPressure:   {"NodeHasNoDiskPressure", "NodeHasDiskPressure"},
		v1.NodePIDPressure:    {"NodeHasSufficientPID", "NodeHasInsufficientPID"},
		v1.NodeReady:          {"NodeNotReady", "NodeReady"},
	}[c.Type]
	reason := event[0]
	if c.Status == v1.ConditionTrue {
		reason = event[1]
	}
	n.cfg.Events.Eventf(n.Ref(), v1.EventTypeNormal, reason, "Node %s status is now: %s", n.cfg.Name, reason)
}

// pressure compares the host's signals with the hard eviction thresholds.
// imagefs is containerd's snapshotter root, looked up once containerd answers.
func (n *Node) pressure(ctx context.Context, runtimeUp bool) map[v1.NodeConditionType]bool {
	out := map[v1.NodeConditionType]bool{}
	th := n.cfg.EvictionHard
	if avail, total, err := memAvailable(); err == nil && th.below(SignalMemoryAvailable, avail, total) {
		out[v1.NodeMemoryPressure] = true
	}
	if fsPressure(th, n.cfg.RootDir, SignalNodeFsAvailable, SignalNodeFsInodesFree) {
		out[v1.NodeDiskPressure] = true
	}
	n.mu.Lock()
	imageFs := n.imageFs
	n.mu.Unlock()
	if imageFs == "" && runtimeUp {
		if dir, err := n.rt.ImageFsDir(ctx); err == nil {
			imageFs = dir
			n.mu.Lock()
			n.imageFs = dir
			n.mu.Unlock()
		}
	}
	if imageFs != "" && fsPressure(th, imageFs, SignalImageFsAvailable, SignalImageFsInodesFree) {
		out[v1.NodeDiskPressure] = true
	}
	// pid.available is the kernel's PID limit less the running processes.
	maxPID := readInt("/proc/sys/kernel/pid_max")
	if tm := readInt("/proc/sys/kernel/threads-max"); tm > 0 && tm < maxPID {
		maxPID = tm
	}
	var info unix.Sysinfo_t
	if maxPID > 0 && unix.Sysinfo(&info) == nil && th.below(SignalPIDAvailable, maxPID-int64(info.Procs), maxPID) {
		out[v1.NodePIDPressure] = true
	}
	return out
}

// fsPressure checks a filesystem's free bytes and inodes.
func fsPressure(th Thresholds, dir, bytesSignal, inodesSignal string) bool {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return false
	}
	return th.below(bytesSignal, int64(fs.Bavail)*fs.Bsize, int64(fs.Blocks)*fs.Bsize) ||
		(fs.Files > 0 && th.below(inodesSignal, int64(fs.Ffree), int64(fs.Files)))
}

// pressureConditions lists the node's pressure conditions that are True,
// for admission.
func (n *Node) pressureConditions() []v1.NodeConditionType {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []v1.NodeConditionType
	for _, c := range n.node.Status.Conditions {
		if c.Type != v1.NodeReady && c.Status == v1.ConditionTrue {
			out = append(out, c.Type)
		}
	}
	return out
}

func memTotal() (int64, error) {
	_, total, err := memAvailable()
	return total, err
}

// memAvailable reads MemAvailable and MemTotal from /proc/meminfo in bytes.
func memAvailable() (avail, total int64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			avail = v * 1024
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("MemTotal not found in /proc/meminfo")
	}
	return avail, total, nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(path string) int64 {
	v, _ := strconv.ParseInt(readTrim(path), 10, 64)
	return v
}

func osImage() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

// DefaultIP is the IPv4 address of the interface holding the default
// route, the kubelet's choice when --node-ip is not given.
func DefaultIP() (string, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(f[0])
		if err != nil {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no default route found; set --node-ip")
}

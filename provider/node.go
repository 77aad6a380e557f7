package provider

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
)

// KubeletVersion is the Kubernetes version whose kubelet hostlet implements.
const KubeletVersion = "v1.35.4"

// NodeConfig describes the node hostlet registers.
type NodeConfig struct {
	Name         string
	InternalIPs  []string
	ExternalIP   string
	Labels       map[string]string
	Taints       []v1.Taint
	MaxPods      int
	Reserved     v1.ResourceList // system-reserved + kube-reserved
	EvictionHard map[string]string
	RootDir      string
	Port         int32
	Version      string
}

// Node is hostlet's node: its object, its conditions from real host signals,
// and admission against its allocatable. It implements virtual-kubelet's
// NodeProvider.
type Node struct {
	cfg NodeConfig
	rt  *runtime.Runtime

	mu           sync.Mutex
	node         *v1.Node
	notify       func(*v1.Node)
	shuttingDown bool
}

func NewNode(ctx context.Context, cfg NodeConfig, rt *runtime.Runtime) (*Node, error) {
	n := &Node{cfg: cfg, rt: rt}
	capacity, err := n.capacity()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"kubernetes.io/hostname":  cfg.Name,
		"kubernetes.io/os":        goruntime.GOOS,
		"kubernetes.io/arch":      goruntime.GOARCH,
		"beta.kubernetes.io/os":   goruntime.GOOS,
		"beta.kubernetes.io/arch": goruntime.GOARCH,
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   cfg.Name,
			Labels: labels,
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: v1.NodeSpec{Taints: cfg.Taints},
		Status: v1.NodeStatus{
			Capacity:        capacity,
			Allocatable:     n.allocatableFrom(capacity),
			Addresses:       n.addresses(),
			NodeInfo:        n.nodeInfo(ctx),
			DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: cfg.Port}},
		},
	}
	node.Status.Conditions = n.conditions(ctx, nil)
	n.node = node
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

// Ping answers virtual-kubelet's liveness check: hostlet itself is up. The
// runtime's health is reported in the Ready condition instead, so the Lease
// keeps being renewed while containerd is down, as with the kubelet.
func (n *Node) Ping(context.Context) error { return nil }

func (n *Node) NotifyNodeStatus(_ context.Context, cb func(*v1.Node)) {
	n.mu.Lock()
	n.notify = cb
	n.mu.Unlock()
}

// Run re-evaluates the node every interval and reports changes at once.
func (n *Node) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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
	next.Status.NodeInfo = n.nodeInfo(ctx)
	next.Status.Conditions = n.conditions(ctx, prev.Status.Conditions)
	if equality.Semantic.DeepEqual(withoutHeartbeats(prev.Status), withoutHeartbeats(next.Status)) {
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

// SetShuttingDown marks the node as shutting down (graceful node shutdown).
func (n *Node) SetShuttingDown(ctx context.Context) {
	n.mu.Lock()
	n.shuttingDown = true
	n.mu.Unlock()
	n.refresh(ctx)
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
	for name, q := range n.cfg.Reserved {
		if v, ok := out[name]; ok {
			v.Sub(q)
			out[name] = v
		}
	}
	if th, ok := n.threshold("memory.available", capacity.Memory().Value()); ok {
		v := out[v1.ResourceMemory]
		v.Sub(*resource.NewQuantity(th, resource.BinarySI))
		out[v1.ResourceMemory] = v
	}
	if th, ok := n.threshold("nodefs.available", capacity.StorageEphemeral().Value()); ok {
		v := out[v1.ResourceEphemeralStorage]
		v.Sub(*resource.NewQuantity(th, resource.BinarySI))
		out[v1.ResourceEphemeralStorage] = v
	}
	for name, v := range out {
		if v.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, v.Format)
		}
	}
	return out
}

// threshold resolves an eviction threshold ("100Mi" or "10%") against total.
func (n *Node) threshold(signal string, total int64) (int64, bool) {
	s, ok := n.cfg.EvictionHard[signal]
	if !ok {
		return 0, false
	}
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil {
			return 0, false
		}
		return int64(float64(total) * f / 100), true
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, false
	}
	return q.Value(), true
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

func (n *Node) nodeInfo(ctx context.Context) v1.NodeSystemInfo {
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
	if v, err := n.rt.Version(ctx); err == nil {
		info.ContainerRuntimeVersion = v
	} else {
		n.mu.Lock()
		if n.node != nil {
			info.ContainerRuntimeVersion = n.node.Status.NodeInfo.ContainerRuntimeVersion
		}
		n.mu.Unlock()
	}
	return info
}

// conditions evaluates the node conditions with the kubelet's reasons,
// keeping transition times of unchanged ones.
func (n *Node) conditions(ctx context.Context, prev []v1.NodeCondition) []v1.NodeCondition {
	now := metav1.Now()
	n.mu.Lock()
	shutdown := n.shuttingDown
	n.mu.Unlock()

	var notReady []string
	if err := n.rt.Healthy(ctx); err != nil {
		notReady = append(notReady, "container runtime is down")
	}
	netErr := n.rt.Network().Status()
	if netErr != nil {
		notReady = append(notReady, "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: "+netErr.Error())
	}
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	switch {
	case shutdown:
		ready = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "node is shutting down"}
	case len(notReady) > 0:
		ready = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: strings.Join(notReady, ", ")}
	}

	memPressure, diskPressure, pidPressure := n.pressure()
	cond := func(t v1.NodeConditionType, bad bool, okReason, okMsg, badReason, badMsg string) v1.NodeCondition {
		if bad {
			return v1.NodeCondition{Type: t, Status: v1.ConditionTrue, Reason: badReason, Message: badMsg}
		}
		return v1.NodeCondition{Type: t, Status: v1.ConditionFalse, Reason: okReason, Message: okMsg}
	}
	out := []v1.NodeCondition{
		cond(v1.NodeMemoryPressure, memPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		cond(v1.NodeDiskPressure, diskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"),
		cond(v1.NodePIDPressure, pidPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
		ready,
		cond(v1.NodeNetworkUnavailable, netErr != nil, "CNIConfigured", "pod network is configured through CNI", "NetworkPluginNotReady", "pod network is not configured: "+fmt.Sprint(netErr)),
	}
	old := map[v1.NodeConditionType]v1.NodeCondition{}
	for _, c := range prev {
		old[c.Type] = c
	}
	for i := range out {
		out[i].LastHeartbeatTime = now
		if o, ok := old[out[i].Type]; ok && o.Status == out[i].Status {
			out[i].LastTransitionTime = o.LastTransitionTime
		} else {
			out[i].LastTransitionTime = now
		}
	}
	return out
}

// pressure compares the host's signals with the hard eviction thresholds.
func (n *Node) pressure() (mem, disk, pid bool) {
	if avail, total, err := memAvailable(); err == nil {
		if th, ok := n.threshold("memory.available", total); ok && avail < th {
			mem = true
		}
	}
	var fs unix.Statfs_t
	if unix.Statfs(n.cfg.RootDir, &fs) == nil {
		total, avail := int64(fs.Blocks)*fs.Bsize, int64(fs.Bavail)*fs.Bsize
		if th, ok := n.threshold("nodefs.available", total); ok && avail < th {
			disk = true
		}
		if th, ok := n.threshold("nodefs.inodesFree", int64(fs.Files)); ok && int64(fs.Ffree) < th {
			disk = true
		}
	}
	if max := readInt("/proc/sys/kernel/pid_max"); max > 0 {
		if th, ok := n.threshold("pid.available", max); ok {
			var info unix.Sysinfo_t
			if unix.Sysinfo(&info) == nil && max-int64(info.Procs) < th {
				pid = true
			}
		}
	}
	return
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

// Admit decides whether the node runs a newly bound pod, as the kubelet's
// admission does; ok is false with the kubelet's reason and message.
func (n *Node) Admit(pod *v1.Pod, running []*v1.Pod) (reason, msg string, ok bool) {
	n.mu.Lock()
	shutdown := n.shuttingDown
	alloc := n.node.Status.Allocatable.DeepCopy()
	n.mu.Unlock()
	if shutdown {
		return "NodeShutdown", "Pod was rejected as the node is shutting down.", false
	}
	if maxPods := alloc.Pods().Value(); int64(len(running))+1 > maxPods {
		return "OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", len(running), maxPods), false
	}
	used := v1.ResourceList{}
	for _, p := range running {
		for name, q := range podRequests(p) {
			v := used[name]
			v.Add(q)
			used[name] = v
		}
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		req, ok := podRequests(pod)[name]
		if !ok || req.IsZero() {
			continue
		}
		capQ := alloc[name]
		u := used[name]
		total := u.DeepCopy()
		total.Add(req)
		if total.Cmp(capQ) > 0 {
			val := func(q resource.Quantity) int64 {
				if name == v1.ResourceCPU {
					return q.MilliValue()
				}
				return q.Value()
			}
			return "Outof" + string(name), fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				name, val(req), val(u), val(capQ)), false
		}
	}
	return "", "", true
}

// podRequests is the pod's effective request: the larger of its init
// containers' (plus sidecars started before them) and its containers' sum,
// plus overhead, as the scheduler and kubelet compute it.
func podRequests(pod *v1.Pod) v1.ResourceList {
	sum := v1.ResourceList{}
	add := func(into v1.ResourceList, from v1.ResourceList) {
		for name, q := range from {
			v := into[name]
			v.Add(q)
			into[name] = v
		}
	}
	for _, c := range pod.Spec.Containers {
		add(sum, c.Resources.Requests)
	}
	sidecars := v1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(sum, c.Resources.Requests)
			add(sidecars, c.Resources.Requests)
			continue
		}
		peak := sidecars.DeepCopy()
		add(peak, c.Resources.Requests)
		for name, q := range peak {
			if cur, ok := sum[name]; !ok || q.Cmp(cur) > 0 {
				sum[name] = q
			}
		}
	}
	add(sum, pod.Spec.Overhead)
	return sum
}

// DefaultNodeIP is the IPv4 address of the interface holding the default
// route, the kubelet's choice when --node-ip is not given.
func DefaultNodeIP() (string, error) {
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

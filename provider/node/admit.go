package node

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"strings"

	"github.com/hostlet/hostlet/runtime"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// systemCriticalPriority is the priority from which the kubelet treats a
// pod as critical (system-cluster-critical and above).
const systemCriticalPriority = 2000000000

// Admit decides whether the node runs a newly bound pod, in the order and
// with the reasons and messages of the kubelet's admit handlers: eviction
// (pressure), sysctls, device assignment, then the general predicates (OS,
// resources, node affinity, host ports, NoExecute taints), AppArmor, the
// declared features, then node shutdown. ok is false with the
// kubelet's reason and message.
func (n *Node) Admit(pod *v1.Pod, running []*v1.Pod) (reason, msg string, ok bool) {
	if reason, msg, ok := admitPressure(pod, n.pressureConditions()); !ok {
		return reason, msg, false
	}
	if reason, msg, ok := n.cfg.Sysctls.admit(pod); !ok {
		return reason, msg, false
	}
	reason, msg, ok = n.admitDevices(pod)
	if ok {
		reason, msg, ok = admitPredicates(pod, n.apiNode(), n.allocatableForAdmission(), running)
	}
	if ok {
		reason, msg, ok = admitAppArmor(pod, runtime.AppArmorEnabled())
	}
	if ok {
		reason, msg, ok = n.cfg.DeclaredFeatures.admit(pod)
	}
	if ok && n.ShuttingDown() {
		reason, msg, ok = "NodeShutdown", "Pod was rejected as the node is shutting down.", false
	}
	if !ok && n.cfg.Devices != nil {
		// Devices assigned to a pod that is not admitted (some of its
		// containers' before another's failed) are free again.
		n.cfg.Devices.Release(pod.UID)
	}
	return reason, msg, ok
}

// Labels are the node's labels as the cluster sees them (those added by
// others too), which a PersistentVolume's node affinity must match.
func (n *Node) Labels() map[string]string { return n.apiNode().Labels }

// apiNode is the Node as the cluster sees it (labels and taints added by
// others count for affinity and taints), or hostlet's own copy before the
// lister has it.
func (n *Node) apiNode() *v1.Node {
	if n.cfg.Lister != nil {
		if node, err := n.cfg.Lister.Get(n.cfg.Name); err == nil {
			return node
		}
	}
	return n.Object()
}

// IsCriticalPod is the kubelet's notion: static or mirror pods and pods of
// system-critical priority.
func IsCriticalPod(pod *v1.Pod) bool {
	if src := pod.Annotations["kubernetes.io/config.source"]; src != "" && src != "api" {
		return true
	}
	if _, mirror := pod.Annotations[v1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}

// admitPressure is the eviction manager's admission: under memory pressure
// only BestEffort pods not tolerating it are rejected, under any other
// pressure every pod but critical ones.
func admitPressure(pod *v1.Pod, conditions []v1.NodeConditionType) (string, string, bool) {
	if len(conditions) == 0 || IsCriticalPod(pod) {
		return "", "", true
	}
	if len(conditions) == 1 && conditions[0] == v1.NodeMemoryPressure {
		if QOSClass(pod) != v1.PodQOSBestEffort {
			return "", "", true
		}
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		if corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, taint, false) {
			return "", "", true
		}
	}
	return "Evicted", fmt.Sprintf("The node had condition: %v. ", conditions), false
}

// admitPredicates is the kubelet's predicate admit handler; the first
// failure found decides reason and message.
func admitPredicates(pod *v1.Pod, node *v1.Node, alloc v1.ResourceList, running []*v1.Pod) (string, string, bool) {
	if os, ok := pod.Labels[v1.LabelOSStable]; ok && os != goruntime.GOOS {
		return "PodOSSelectorNodeLabelDoesNotMatch", "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label", false
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != goruntime.GOOS {
		return "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS", false
	}
	if reason, msg, ok := admitResources(pod, alloc, running); !ok {
		return reason, msg, false
	}
	predicate := func(name, desc string) (string, string, bool) {
		return name, fmt.Sprintf("Predicate %s failed: %s", name, desc), false
	}
	if match, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !match {
		return predicate("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
	}
	if !hostPortsFree(pod, running) {
		return predicate("NodePorts", "node(s) didn't have free ports for the requested pod ports")
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoExecute
	}, false); untolerated {
		return predicate("TaintToleration", "node(s) had taints that the pod didn't tolerate")
	}
	return "", "", true
}

// admitResources is the scheduler's resource fit as the kubelet applies it:
// pod count first, then cpu, memory, ephemeral storage and the rest.
// Extended resources the node does not have at all are ignored, as the
// kubelet does (a device plugin may not have registered yet).
func admitResources(pod *v1.Pod, alloc v1.ResourceList, running []*v1.Pod) (string, string, bool) {
	if maxPods := alloc.Pods().Value(); int64(len(running))+1 > maxPods {
		return "OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", len(running), maxPods), false
	}
	used := v1.ResourceList{}
	for _, p := range running {
		addResources(used, podRequests(p))
	}
	req := podRequests(pod)
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}
	var others []string
	for name := range req {
		if name == v1.ResourceCPU || name == v1.ResourceMemory || name == v1.ResourceEphemeralStorage {
			continue
		}
		if _, has := alloc[name]; !has && isExtendedResource(name) {
			continue
		}
		others = append(others, string(name))
	}
	sort.Strings(others)
	for _, o := range others {
		names = append(names, v1.ResourceName(o))
	}
	for _, name := range names {
		r, ok := req[name]
		if !ok || r.IsZero() {
			continue
		}
		capQ, u := alloc[name], used[name]
		total := u.DeepCopy()
		total.Add(r)
		if total.Cmp(capQ) <= 0 {
			continue
		}
		val := func(q resource.Quantity) int64 {
			if name == v1.ResourceCPU {
				return q.MilliValue()
			}
			return q.Value()
		}
		return "OutOf" + string(name), fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
			name, val(r), val(u), val(capQ)), false
	}
	return "", "", true
}

// isExtendedResource: a resource outside kubernetes.io and not a hugepage.
func isExtendedResource(name v1.ResourceName) bool {
	s := string(name)
	if strings.HasPrefix(s, v1.ResourceHugePagesPrefix) || strings.HasPrefix(s, "requests.") {
		return false
	}
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/")
}

func addResources(into, from v1.ResourceList) {
	for name, q := range from {
		v := into[name]
		v.Add(q)
		into[name] = v
	}
}

// podRequests is the pod's effective request: the larger of its init
// containers' (plus sidecars started before them) and its containers' sum,
// replaced by pod-level requests where given, plus overhead, as the
// scheduler and kubelet compute it.
func podRequests(pod *v1.Pod) v1.ResourceList {
	sum := v1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		addResources(sum, c.Resources.Requests)
	}
	sidecars := v1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			addResources(sum, c.Resources.Requests)
			addResources(sidecars, c.Resources.Requests)
			continue
		}
		peak := sidecars.DeepCopy()
		addResources(peak, c.Resources.Requests)
		for name, q := range peak {
			if cur, ok := sum[name]; !ok || q.Cmp(cur) > 0 {
				sum[name] = q
			}
		}
	}
	if pod.Spec.Resources != nil {
		for name, q := range pod.Spec.Resources.Requests {
			sum[name] = q
		}
	}
	addResources(sum, pod.Spec.Overhead)
	return sum
}

// hostPortsFree is the NodePorts predicate: a wanted host port conflicts
// with one in use on the same protocol and the same IP, 0.0.0.0 matching
// every IP.
func hostPortsFree(pod *v1.Pod, running []*v1.Pod) bool {
	type use struct{ ip, proto string }
	inUse := map[int32][]use{}
	norm := func(p v1.ContainerPort) use {
		u := use{p.HostIP, string(p.Protocol)}
		if u.ip == "" {
			u.ip = "0.0.0.0"
		}
		if u.proto == "" {
			u.proto = string(v1.ProtocolTCP)
		}
		return u
	}
	for _, p := range running {
		for _, cp := range hostPorts(p) {
			inUse[cp.HostPort] = append(inUse[cp.HostPort], norm(cp))
		}
	}
	for _, cp := range hostPorts(pod) {
		want := norm(cp)
		for _, u := range inUse[cp.HostPort] {
			if u.proto == want.proto && (u.ip == want.ip || u.ip == "0.0.0.0" || want.ip == "0.0.0.0") {
				logrus.WithFields(logrus.Fields{"pod": cache.MetaObjectToName(pod).String(), "port": cp.HostPort}).Debug("host port in use")
				return false
			}
		}
	}
	return true
}

// hostPorts lists the host ports of containers that run for the pod's
// whole life (containers and sidecars).
func hostPorts(pod *v1.Pod) []v1.ContainerPort {
	var cs []v1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			cs = append(cs, c)
		}
	}
	var out []v1.ContainerPort
	for _, c := range append(cs, pod.Spec.Containers...) {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				out = append(out, p)
			}
		}
	}
	return out
}

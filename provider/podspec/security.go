package podspec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

func podRef(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// containerSecurity merges the pod's and the container's security context
// as the kubelet does (the container's wins) and checks runAsNonRoot
// against the user the container would run as.
func (r *Runtime) containerSecurity(pod *v1.Pod, c *v1.Container, imageUser string) (runtime.Security, error) {
	var sec runtime.Security
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &v1.SecurityContext{}
	}
	sec.RunAsUser, sec.RunAsGroup = psc.RunAsUser, psc.RunAsGroup
	if csc.RunAsUser != nil {
		sec.RunAsUser = csc.RunAsUser
	}
	if csc.RunAsGroup != nil {
		sec.RunAsGroup = csc.RunAsGroup
	}
	runAsNonRoot := psc.RunAsNonRoot
	if csc.RunAsNonRoot != nil {
		runAsNonRoot = csc.RunAsNonRoot
	}
	if runAsNonRoot != nil && *runAsNonRoot {
		if err := verifyNonRoot(pod, c, sec.RunAsUser, imageUser); err != nil {
			return sec, err
		}
	}
	switch p := psc.SupplementalGroupsPolicy; {
	case p == nil || *p == v1.SupplementalGroupsPolicyMerge:
	case *p == v1.SupplementalGroupsPolicyStrict:
		sec.StrictGroups = true
	default:
		return sec, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *p)
	}
	sec.SupplementalGroups = append(sec.SupplementalGroups, psc.SupplementalGroups...)
	if psc.FSGroup != nil {
		sec.SupplementalGroups = append(sec.SupplementalGroups, *psc.FSGroup)
	}
	sec.Privileged = csc.Privileged != nil && *csc.Privileged
	sec.ReadOnlyRootFS = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	sec.NoNewPrivileges = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	sec.UnmaskedProc = csc.ProcMount != nil && *csc.ProcMount == v1.UnmaskedProcMount
	if caps := csc.Capabilities; caps != nil {
		for _, c := range caps.Add {
			sec.CapAdd = append(sec.CapAdd, string(c))
		}
		for _, c := range caps.Drop {
			sec.CapDrop = append(sec.CapDrop, string(c))
		}
	}
	if len(psc.Sysctls) > 0 {
		sec.Sysctls = map[string]string{}
		for _, s := range psc.Sysctls {
			sec.Sysctls[node.NormalizeSysctl(s.Name)] = s.Value
		}
	}
	sec.Sysctls = withUnprivilegedNet(pod, sec.Sysctls)
	profile := psc.SeccompProfile
	if csc.SeccompProfile != nil {
		profile = csc.SeccompProfile
	}
	if profile == nil && r.cfg.SeccompDefault {
		// The kubelet's seccompDefault: a container that names no profile
		// runs with the runtime's default one (a privileged container
		// with none, as containerd's CRI runs it).
		profile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
	}
	if profile != nil {
		switch profile.Type {
		case v1.SeccompProfileTypeRuntimeDefault:
			sec.Seccomp = runtime.ProfileRuntimeDefault
		case v1.SeccompProfileTypeLocalhost:
			if profile.LocalhostProfile == nil || *profile.LocalhostProfile == "" {
				return sec, fmt.Errorf("localhostProfile must be set if seccompProfile type is Localhost.")
			}
			sec.Seccomp = filepath.Join(r.cfg.RootDir, "seccomp", *profile.LocalhostProfile)
		}
	}
	if aa := node.AppArmorProfile(pod, c); aa != nil {
		switch aa.Type {
		case v1.AppArmorProfileTypeUnconfined:
			sec.AppArmor = runtime.ProfileUnconfined
		case v1.AppArmorProfileTypeRuntimeDefault:
			sec.AppArmor = runtime.ProfileRuntimeDefault
		case v1.AppArmorProfileTypeLocalhost:
			if aa.LocalhostProfile != nil {
				sec.AppArmor = *aa.LocalhostProfile
			}
		}
	}
	return sec, nil
}

// verifyNonRoot refuses a container that would run as root, with the
// kubelet's messages.
func verifyNonRoot(pod *v1.Pod, c *v1.Container, runAsUser *int64, imageUser string) error {
	if runAsUser != nil {
		if *runAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podRef(pod), c.Name)
		}
		return nil
	}
	user, _, _ := strings.Cut(imageUser, ":")
	if user == "" {
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podRef(pod), c.Name)
	}
	uid, err := strconv.ParseInt(user, 10, 64)
	if err != nil {
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", user, podRef(pod), c.Name)
	}
	if uid == 0 {
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podRef(pod), c.Name)
	}
	return nil
}

// Kubelet constants for cgroup settings.
const (
	minShares     = 2
	guaranteedOOM = -997
	bestEffortOOM = 1000
)

// nodeCritical is the kubelet's IsNodeCriticalPod: critical (static,
// mirror, system priority) and of the system-node-critical class.
func nodeCritical(pod *v1.Pod) bool {
	return node.IsCriticalPod(pod) && pod.Spec.PriorityClassName == "system-node-critical"
}

// containerResources turns requests and limits into cgroup settings and the
// OOM score adjustment of the pod's QoS class.
func (r *Runtime) containerResources(pod *v1.Pod, c *v1.Container) runtime.Resources {
	out := runtime.Resources{CPUShares: minShares}
	if q, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		if shares := uint64(q.MilliValue() * 1024 / 1000); shares > minShares {
			out.CPUShares = shares
		}
	}
	out.CPUQuota, out.CPUPeriod = r.cfg.CFSQuota.container(c.Resources.Limits.Cpu().MilliValue())
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		out.MemoryLimit = q.Value()
	}
	out.MemorySwap, out.Unified = r.cfg.Swap.container(pod, c, out.MemoryLimit)
	out.Unified = r.withOOMGroup(out.Unified)
	switch {
	case nodeCritical(pod):
		// The kubelet protects node-critical pods (a static control plane
		// or agent) as guaranteed ones, whatever their QoS class.
		out.OOMScoreAdj = guaranteedOOM
	case node.QOSClass(pod) == v1.PodQOSGuaranteed:
		out.OOMScoreAdj = guaranteedOOM
	case node.QOSClass(pod) == v1.PodQOSBestEffort:
		out.OOMScoreAdj = bestEffortOOM
	default:
		mem := r.cfg.Node.Capacity()[v1.ResourceMemory]
		capacity := mem.Value()
		req := c.Resources.Requests.Memory().Value()
		adj := bestEffortOOM
		if capacity > 0 {
			adj = 1000 - int(1000*req/capacity)
		}
		out.OOMScoreAdj = min(max(adj, 2), 999)
	}
	return out
}

// The sysctls containerd's CRI gives every sandbox with a network of its
// own (enable_unprivileged_ports and enable_unprivileged_icmp, on by
// default): any user binds the low ports and opens ICMP echo sockets.
const (
	sysctlUnprivilegedPortStart = "net.ipv4.ip_unprivileged_port_start"
	sysctlPingGroupRange        = "net.ipv4.ping_group_range"
)

// withUnprivilegedNet adds those to the pod's sysctls where the pod sets
// none of its own, as containerd's sandbox: not on the host's network, and
// the ICMP range not in a user namespace (whose IDs it would not map).
func withUnprivilegedNet(pod *v1.Pod, sysctls map[string]string) map[string]string {
	if pod.Spec.HostNetwork {
		return sysctls
	}
	if sysctls == nil {
		sysctls = map[string]string{}
	}
	if _, ok := sysctls[sysctlUnprivilegedPortStart]; !ok {
		sysctls[sysctlUnprivilegedPortStart] = "0"
	}
	userns := pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
	if _, ok := sysctls[sysctlPingGroupRange]; !ok && !userns {
		sysctls[sysctlPingGroupRange] = "0 2147483647"
	}
	return sysctls
}

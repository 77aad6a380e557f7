package cri

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sandboxInfo is containerd's verbose sandbox status (its SandboxInfo,
// under the "info" key, as crictl inspectp shows it). A hostlet sandbox
// is namespaces hostlet holds, no pause container: no image, snapshot,
// runtime or OCI spec of its own, and no CNI result or sandbox metadata
// kept as containerd's; those keys are there, empty.
type sandboxInfo struct {
	Pid            uint32                   `json:"pid"`
	Status         string                   `json:"processStatus"`
	NetNSClosed    bool                     `json:"netNamespaceClosed"`
	Image          string                   `json:"image"`
	SnapshotKey    string                   `json:"snapshotKey"`
	Snapshotter    string                   `json:"snapshotter"`
	RuntimeType    string                   `json:"runtimeType"`
	RuntimeOptions any                      `json:"runtimeOptions"`
	Config         *criapi.PodSandboxConfig `json:"config"`
	RuntimeSpec    any                      `json:"runtimeSpec"`
	CNIResult      any                      `json:"cniResult"`
	Metadata       any                      `json:"sandboxMetadata"`
}

// sandboxVerboseInfo is the "info" of a verbose PodSandboxStatus.
func (s *server) sandboxVerboseInfo(ctx context.Context, p *podSandbox) (map[string]string, error) {
	// Not ready: released, its namespaces gone, as containerd's stopped
	// sandbox whose pause task was deleted.
	info := sandboxInfo{Status: "deleted", NetNSClosed: true}
	if p.state() == criapi.PodSandboxState_SANDBOX_READY {
		info.Status, info.NetNSClosed = "running", false
		info.Pid = uint32(max(p.rec.PausePID, 0))
	}
	if p.pod != nil {
		logDir := ""
		if cs, err := s.cfg.Runtime.ListContainers(ctx, p.uid); err == nil {
			for _, c := range cs {
				if c.LogPath != "" {
					logDir = filepath.Dir(filepath.Dir(c.LogPath))
					break
				}
			}
		}
		info.Config = sandboxConfig(p, logDir, s.cfg.CFSQuota)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal info of sandbox %q: %w", sandboxID(p.uid), err)
	}
	return map[string]string{"info": string(b)}, nil
}

// sandboxConfig is the kubelet's generatePodSandboxConfig for the pod, as
// far as the node's state says it: its metadata, labels and annotations;
// the hostname and DNS config its sandbox was given (the files hostlet
// wrote for it); its log directory (logDir, its containers'); its
// containers' ports; the pod cgroup and the sandbox's security context and
// sysctls (generatePodSandboxLinuxConfig), its resources and overhead
// (applySandboxResources).
func sandboxConfig(p *podSandbox, logDir string, quota CFSQuota) *criapi.PodSandboxConfig {
	pod := p.pod
	cfg := &criapi.PodSandboxConfig{
		Metadata:     p.metadata(),
		Labels:       p.labels(),
		Annotations:  p.annotations(),
		LogDirectory: logDir,
	}
	if rec := p.rec; rec != nil {
		if !pod.Spec.HostNetwork {
			if b, err := os.ReadFile(rec.HostnamePath()); err == nil {
				cfg.Hostname = strings.TrimSpace(string(b))
			}
		}
		cfg.DnsConfig = readDNSConfig(rec.ResolvConfPath())
	}
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			proto := criapi.Protocol_TCP
			switch port.Protocol {
			case v1.ProtocolUDP:
				proto = criapi.Protocol_UDP
			case v1.ProtocolSCTP:
				proto = criapi.Protocol_SCTP
			}
			cfg.PortMappings = append(cfg.PortMappings, &criapi.PortMapping{Protocol: proto, ContainerPort: port.ContainerPort,
				HostPort: port.HostPort, HostIp: port.HostIP})
		}
	}
	lc := &criapi.LinuxPodSandboxConfig{
		SecurityContext: &criapi.LinuxSandboxSecurityContext{
			Privileged: hasPrivileged(pod),
			Seccomp:    &criapi.SecurityProfile{ProfileType: criapi.SecurityProfile_RuntimeDefault},
		},
		Sysctls: map[string]string{},
	}
	if p.rec != nil {
		lc.CgroupParent = p.rec.CgroupParent
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		for _, s := range sc.Sysctls {
			lc.Sysctls[s.Name] = s.Value
		}
		if len(sc.Sysctls) > 0 && !pod.Spec.HostNetwork {
			// containerd's RunPodSandbox adds its unprivileged ports and
			// ICMP sysctls (which hostlet's podspec gives every pod of its
			// own network) into the config's own map, so its status shows
			// them there; a config without sysctls has no map to add to.
			if _, ok := lc.Sysctls["net.ipv4.ip_unprivileged_port_start"]; !ok {
				lc.Sysctls["net.ipv4.ip_unprivileged_port_start"] = "0"
			}
			userns := pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
			if _, ok := lc.Sysctls["net.ipv4.ping_group_range"]; !ok && !userns {
				lc.Sysctls["net.ipv4.ping_group_range"] = "0 2147483647"
			}
		}
		l := lc.SecurityContext
		if sc.RunAsUser != nil {
			l.RunAsUser = &criapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			l.RunAsGroup = &criapi.Int64Value{Value: *sc.RunAsGroup}
		}
		l.NamespaceOptions = p.namespaceOptions()
		if sc.FSGroup != nil {
			l.SupplementalGroups = append(l.SupplementalGroups, *sc.FSGroup)
		}
		l.SupplementalGroups = append(l.SupplementalGroups, sc.SupplementalGroups...)
		if sc.SupplementalGroupsPolicy != nil {
			l.SupplementalGroupsPolicy = criapi.SupplementalGroupsPolicy(criapi.SupplementalGroupsPolicy_value[string(*sc.SupplementalGroupsPolicy)])
		}
		if o := sc.SELinuxOptions; o != nil {
			l.SelinuxOptions = &criapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
		}
	}
	lc.Resources = sandboxResources(pod, quota)
	lc.Overhead = &criapi.LinuxContainerResources{}
	if o := pod.Spec.Overhead; o != nil {
		lc.Overhead = linuxResources(o.Cpu(), o.Cpu(), o.Memory(), quota)
	}
	cfg.Linux = lc
	return cfg
}

// CFSQuota is how the node enforces CPU limits (the kubelet's cpuCFSQuota
// and cpuCFSQuotaPeriod): Period in microseconds, 0 when it does not.
type CFSQuota struct {
	Period uint64
}

// sandboxResources are the kubelet's calculateSandboxResources: the pod's
// requests and limits (pod-level resources where set, no overhead).
func sandboxResources(pod *v1.Pod, quota CFSQuota) *criapi.LinuxContainerResources {
	opts := resourcehelper.PodResourcesOptions{ExcludeOverhead: true}
	req, lim := resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts)
	var cpuRequest *resource.Quantity
	if _, ok := req[v1.ResourceCPU]; ok {
		cpuRequest = req.Cpu()
	}
	return linuxResources(cpuRequest, lim.Cpu(), lim.Memory(), quota)
}

// linuxResources are the kubelet's calculateLinuxResources: CPU shares of
// the request (of the limit without one), the memory limit, and with
// quotas enforced the period and the limit's quota.
func linuxResources(cpuRequest, cpuLimit, memoryLimit *resource.Quantity, quota CFSQuota) *criapi.LinuxContainerResources {
	out := &criapi.LinuxContainerResources{}
	if cpuRequest == nil && cpuLimit != nil {
		out.CpuShares = int64(runtime.MilliCPUToShares(cpuLimit.MilliValue()))
	} else {
		out.CpuShares = int64(runtime.MilliCPUToShares(cpuRequest.MilliValue()))
	}
	out.MemoryLimitInBytes = memoryLimit.Value()
	if quota.Period != 0 {
		out.CpuPeriod = int64(quota.Period)
		out.CpuQuota = runtime.MilliCPUToQuota(cpuLimit.MilliValue(), out.CpuPeriod)
	}
	return out
}

// hasPrivileged is the kubelet's HasPrivilegedContainer: any init,
// regular or ephemeral container privileged.
func hasPrivileged(pod *v1.Pod) bool {
	priv := func(sc *v1.SecurityContext) bool { return sc != nil && sc.Privileged != nil && *sc.Privileged }
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if priv(c.SecurityContext) {
				return true
			}
		}
	}
	for _, e := range pod.Spec.EphemeralContainers {
		if priv(e.SecurityContext) {
			return true
		}
	}
	return false
}

// readDNSConfig reads a resolv.conf back into CRI's DNSConfig (what the
// kubelet asked for and containerd wrote): nil when there is none.
func readDNSConfig(path string) *criapi.DNSConfig {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	out := &criapi.DNSConfig{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			out.Servers = append(out.Servers, fields[1])
		case "search":
			out.Searches = append(out.Searches, fields[1:]...)
		case "options":
			out.Options = append(out.Options, fields[1:]...)
		}
	}
	return out
}

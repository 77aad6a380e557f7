package provider

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

func podRef(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// containerSecurity merges the pod's and the container's security context
// as the kubelet does (the container's wins) and checks runAsNonRoot
// against the user the container would run as.
func (p *Provider) containerSecurity(pod *v1.Pod, c *v1.Container, imageUser string) (runtime.Security, error) {
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
			sec.Sysctls[normalizeSysctl(s.Name)] = s.Value
		}
	}
	profile := psc.SeccompProfile
	if csc.SeccompProfile != nil {
		profile = csc.SeccompProfile
	}
	if profile != nil {
		switch profile.Type {
		case v1.SeccompProfileTypeRuntimeDefault:
			sec.Seccomp = runtime.ProfileRuntimeDefault
		case v1.SeccompProfileTypeLocalhost:
			if profile.LocalhostProfile == nil || *profile.LocalhostProfile == "" {
				return sec, fmt.Errorf("localhostProfile must be set if seccompProfile type is Localhost.")
			}
			sec.Seccomp = filepath.Join(p.cfg.RootDir, "seccomp", *profile.LocalhostProfile)
		}
	}
	if aa := appArmorProfile(pod, c); aa != nil {
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

// appArmorProfile is the container's AppArmor profile as the kubelet picks
// it: the container's field, then the deprecated per-container annotation,
// then the pod's field.
func appArmorProfile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if val, ok := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case val == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
		case val == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
	}
	if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.AppArmorProfile != nil {
		return pod.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// appArmorRequired: any profile other than Unconfined, in a field or an
// annotation, needs AppArmor on the host (the kubelet's isRequired).
func appArmorRequired(pod *v1.Pod) bool {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != v1.AppArmorProfileTypeUnconfined {
		return true
	}
	required := false
	visitContainers(pod, func(c *v1.Container) {
		if sc := c.SecurityContext; sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != v1.AppArmorProfileTypeUnconfined {
			required = true
		}
	})
	if required {
		return true
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) {
			return v != v1.DeprecatedAppArmorBetaProfileNameUnconfined
		}
	}
	return false
}

// admitAppArmor is the kubelet's AppArmor admit handler: a pod that needs
// AppArmor is refused on a host without it, and an empty Localhost profile
// name anywhere.
func admitAppArmor(pod *v1.Pod, enabled bool) (string, string, bool) {
	if pod.Status.Phase != "" && pod.Status.Phase != v1.PodPending {
		return "", "", true
	}
	if !appArmorRequired(pod) {
		return "", "", true
	}
	if !enabled {
		return "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host", false
	}
	var msg string
	visitContainers(pod, func(c *v1.Container) {
		if p := appArmorProfile(pod, c); msg == "" && p != nil && p.Type == v1.AppArmorProfileTypeLocalhost &&
			(p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
			msg = fmt.Sprintf("Cannot enforce AppArmor: invalid empty AppArmor profile name: %q", p)
		}
	})
	if msg != "" {
		return "AppArmor", msg, false
	}
	return "", "", true
}

// visitContainers calls f for init, regular and ephemeral containers.
func visitContainers(pod *v1.Pod, f func(c *v1.Container)) {
	for i := range pod.Spec.InitContainers {
		f(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		f(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		f(&c)
	}
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
	cpuPeriod     = 100000
	minShares     = 2
	minQuota      = 1000
	guaranteedOOM = -997
	bestEffortOOM = 1000
)

// containerResources turns requests and limits into cgroup settings and the
// OOM score adjustment of the pod's QoS class.
func (p *Provider) containerResources(pod *v1.Pod, c *v1.Container) runtime.Resources {
	r := runtime.Resources{CPUShares: minShares, CPUPeriod: cpuPeriod}
	if q, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		if shares := uint64(q.MilliValue() * 1024 / 1000); shares > minShares {
			r.CPUShares = shares
		}
	}
	if q, ok := c.Resources.Limits[v1.ResourceCPU]; ok {
		r.CPUQuota = max(q.MilliValue()*cpuPeriod/1000, minQuota)
	}
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		r.MemoryLimit = q.Value()
	}
	switch qosClass(pod) {
	case v1.PodQOSGuaranteed:
		r.OOMScoreAdj = guaranteedOOM
	case v1.PodQOSBestEffort:
		r.OOMScoreAdj = bestEffortOOM
	default:
		capacity := p.node.Object().Status.Capacity.Memory().Value()
		req := c.Resources.Requests.Memory().Value()
		adj := bestEffortOOM
		if capacity > 0 {
			adj = 1000 - int(1000*req/capacity)
		}
		r.OOMScoreAdj = min(max(adj, 2), 999)
	}
	return r
}

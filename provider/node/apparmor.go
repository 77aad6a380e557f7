package node

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// AppArmorProfile is the container's AppArmor profile as the kubelet picks
// it: the container's field, then the deprecated per-container annotation,
// then the pod's field.
func AppArmorProfile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
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
		if p := AppArmorProfile(pod, c); msg == "" && p != nil && p.Type == v1.AppArmorProfileTypeLocalhost &&
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

package node

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestAdmitAppArmor(t *testing.T) {
	pod := func(mut func(*v1.Pod)) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
		mut(p)
		return p
	}
	localhost := "k8s-deny-write"
	cases := []struct {
		name    string
		pod     *v1.Pod
		enabled bool
		ok      bool
	}{
		{"none", pod(func(*v1.Pod) {}), false, true},
		{"unconfined field", pod(func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}}
		}), false, true},
		{"runtime default field", pod(func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
		}), false, false},
		{"localhost annotation", pod(func(p *v1.Pod) {
			p.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "localhost/" + localhost}
		}), false, false},
		{"unconfined annotation", pod(func(p *v1.Pod) {
			p.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "unconfined"}
		}), false, true},
		{"localhost enabled", pod(func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &localhost}}
		}), true, true},
	}
	for _, c := range cases {
		reason, msg, ok := admitAppArmor(c.pod, c.enabled)
		if ok != c.ok {
			t.Errorf("%s: ok = %v (%s: %s)", c.name, ok, reason, msg)
		}
		if !ok && (reason != "AppArmor" || msg != "Cannot enforce AppArmor: AppArmor is not enabled on the host") {
			t.Errorf("%s: %s: %s", c.name, reason, msg)
		}
	}
	// The container field wins over the annotation, the annotation over the pod field.
	p := pod(func(p *v1.Pod) {
		p.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "runtime/default"}
		p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}}
	})
	if got := AppArmorProfile(p, &p.Spec.Containers[0]); got == nil || got.Type != v1.AppArmorProfileTypeRuntimeDefault {
		t.Errorf("annotation over pod field: %+v", got)
	}
	p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &localhost}}
	if got := AppArmorProfile(p, &p.Spec.Containers[0]); got == nil || got.Type != v1.AppArmorProfileTypeLocalhost {
		t.Errorf("container field over annotation: %+v", got)
	}
}

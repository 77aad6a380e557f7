package node

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func admitPod(mut func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	if mut != nil {
		mut(p)
	}
	return p
}

func TestAdmitPredicates(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "dedicated", Value: "x", Effect: v1.TaintEffectNoExecute}}}}
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("3")}
	tolerate := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists}}
	}
	hostPort := func(p *v1.Pod) {
		tolerate(p)
		p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	}
	running := []*v1.Pod{admitPod(hostPort)}
	for _, tc := range []struct {
		name, reason string
		mut          func(*v1.Pod)
	}{
		{"fits", "", tolerate},
		{"taint", "TaintToleration", nil},
		{"cpu", "OutOfcpu", func(p *v1.Pod) {
			tolerate(p)
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("3")}
		}},
		{"selector", "NodeAffinity", func(p *v1.Pod) { tolerate(p); p.Spec.NodeSelector = map[string]string{"zone": "b"} }},
		{"port", "NodePorts", hostPort},
		{"os", "PodOSNotSupported", func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: "windows"} }},
	} {
		reason, msg, ok := admitPredicates(admitPod(tc.mut), node, alloc, running)
		if ok != (tc.reason == "") || reason != tc.reason {
			t.Errorf("%s: got %q %q ok=%v, want %q", tc.name, reason, msg, ok, tc.reason)
		}
	}
	full := []*v1.Pod{admitPod(nil), admitPod(nil), admitPod(nil)}
	if reason, msg, _ := admitResources(admitPod(nil), alloc, full); reason != "OutOfpods" ||
		msg != "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3" {
		t.Errorf("pods: %q %q", reason, msg)
	}
}

func TestAdmitPressure(t *testing.T) {
	best := admitPod(nil)
	burst := admitPod(func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Mi")}
	})
	crit := int32(systemCriticalPriority)
	critical := admitPod(func(p *v1.Pod) { p.Spec.Priority = &crit })
	mem := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	if _, msg, ok := admitPressure(best, mem); ok || msg != "The node had condition: [MemoryPressure]. " {
		t.Errorf("BestEffort under memory pressure: ok=%v %q", ok, msg)
	}
	if _, _, ok := admitPressure(burst, mem); !ok {
		t.Error("Burstable rejected under memory pressure")
	}
	if reason, _, ok := admitPressure(burst, disk); ok || reason != "Evicted" {
		t.Error("Burstable admitted under disk pressure")
	}
	if _, _, ok := admitPressure(critical, disk); !ok {
		t.Error("critical pod rejected under disk pressure")
	}
}

func TestAdmitSysctls(t *testing.T) {
	pod := func(host bool, names ...string) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{HostNetwork: host, SecurityContext: &v1.PodSecurityContext{}}}
		for _, n := range names {
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
		}
		return p
	}
	for _, tc := range []struct {
		pod *v1.Pod
		ok  bool
		msg string
	}{
		{pod(false, "kernel.shm_rmid_forced", "net/ipv4/ip_local_port_range"), true, ""},
		{pod(false, "kernel.msgmax"), false, `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{pod(true, "net.ipv4.tcp_syncookies"), false, `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host Net enabled`},
	} {
		reason, msg, ok := (*SysctlAllowlist)(nil).admit(tc.pod)
		if ok != tc.ok || msg != tc.msg || (!ok && reason != "SysctlForbidden") {
			t.Errorf("admit = %q %q %v, want %q %v", reason, msg, ok, tc.msg, tc.ok)
		}
	}

	// allowedUnsafeSysctls: names and prefixes of a namespace the pod has.
	w, err := NewSysctlAllowlist([]string{"kernel.msgmax", "net.core.*", "kernel/sem"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod *v1.Pod
		ok  bool
		msg string
	}{
		{pod(false, "kernel.msgmax", "net.core.somaxconn", "kernel.sem", "net.ipv4.tcp_syncookies"), true, ""},
		{pod(false, "kernel.msgmnb"), false, `forbidden sysctl: "kernel.msgmnb" not allowlisted`},
		{pod(true, "net.core.somaxconn"), false, `forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled`},
	} {
		reason, msg, ok := w.admit(tc.pod)
		if ok != tc.ok || msg != tc.msg || (!ok && reason != "SysctlForbidden") {
			t.Errorf("admit with unsafe sysctls = %q %q %v, want %q %v", reason, msg, ok, tc.msg, tc.ok)
		}
	}
	for pattern, want := range map[string]string{
		"vm.swappiness": `the sysctls "vm.swappiness" are not known to be namespaced`,
		"kernel.*":      `the sysctls "kernel." are not known to be namespaced`,
		"net..core":     `sysctl "net..core" must have at most 253 characters`,
	} {
		if _, err := NewSysctlAllowlist([]string{pattern}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("allowedUnsafeSysctls %q: %v, want %q", pattern, err, want)
		}
	}
}

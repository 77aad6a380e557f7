package podspec

import (
	"strings"
	"testing"

	"github.com/hostlet/hostlet/kubeletconfig"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// hostnameOverride as the kubelet's GeneratePodHostNameAndDomain: the
// name as given (a subdomain may have dots), no FQDN whatever the
// subdomain, truncated to 63; ignored with the gate off; an invalid one
// refused in the kubelet's words.
func TestHostnameOverride(t *testing.T) {
	r := &Runtime{cfg: Config{ClusterDomain: "cluster.local"}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: v1.PodSpec{Hostname: "h", Subdomain: "sub", HostnameOverride: ptr.To("my.custom-host")}}
	if h, fqdn := r.podHostname(pod); h != "my.custom-host" || fqdn != "" {
		t.Fatalf("override: %q %q", h, fqdn)
	}
	if err := r.checkHostname(pod); err != nil {
		t.Fatal(err)
	}
	pod.Spec.HostnameOverride = ptr.To(strings.Repeat("a", 62) + ".b")
	if h, _ := r.podHostname(pod); h != strings.Repeat("a", 62) {
		t.Fatalf("truncated: %q", h)
	}
	pod.Spec.HostnameOverride = ptr.To("Not_Valid")
	if err := r.checkHostname(pod); err == nil || !strings.HasPrefix(err.Error(), `pod HostnameOverride "Not_Valid" is not a valid DNS subdomain: `) {
		t.Fatalf("invalid: %v", err)
	}
	g := kubeletconfig.NewFeatureGate()
	if err := g.SetFromMap(map[string]bool{"HostnameOverride": false}); err != nil {
		t.Fatal(err)
	}
	r.cfg.Gates = g
	if h, fqdn := r.podHostname(pod); h != "h" || fqdn != "h.sub.ns.svc.cluster.local" {
		t.Fatalf("gate off: %q %q", h, fqdn)
	}
	if err := r.checkHostname(pod); err != nil {
		t.Fatalf("gate off: %v", err)
	}
}

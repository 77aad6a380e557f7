package podspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cluster domain as the kubelet's dns configurer uses it: with one,
// ClusterFirst pods search the cluster's domains before the host's and a
// subdomain gives the FQDN ending in it; without (the kubelet's default),
// the host's searches only and an FQDN ending in "svc.".
func TestClusterDomain(t *testing.T) {
	host := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(host, []byte("search example.com\nnameserver 192.0.2.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{Hostname: "h", Subdomain: "sub"}}
	for domain, want := range map[string]struct{ search, fqdn string }{
		"cluster.local": {"search ns.svc.cluster.local svc.cluster.local cluster.local example.com\n", "h.sub.ns.svc.cluster.local"},
		"":              {"search example.com\n", "h.sub.ns.svc."},
	} {
		r := &Runtime{cfg: Config{ClusterDNS: []string{"10.0.0.10"}, ClusterDomain: domain, ResolvConf: host}}
		if got := r.resolvConf(pod); !strings.Contains(got, want.search) || !strings.Contains(got, "nameserver 10.0.0.10\n") {
			t.Errorf("domain %q: resolv.conf %q, want %q", domain, got, want.search)
		}
		if _, fqdn := r.podHostname(pod); fqdn != want.fqdn {
			t.Errorf("domain %q: FQDN %q, want %q", domain, fqdn, want.fqdn)
		}
	}
}

// setHostnameAsFQDN makes the FQDN the hostname, refused past the kernel's
// 64 bytes with the kubelet's message.
func TestKernelHostname(t *testing.T) {
	yes, no := true, false
	if h, err := kernelHostname("h", "h.s.ns.svc.", &yes); h != "h.s.ns.svc." || err != nil {
		t.Errorf("as FQDN: %q %v", h, err)
	}
	if h, err := kernelHostname("h", "h.s.ns.svc.", &no); h != "h" || err != nil {
		t.Errorf("not as FQDN: %q %v", h, err)
	}
	long := strings.Repeat("a", 55) + ".t.ns.svc.cluster.local"
	if _, err := kernelHostname("h", long, &yes); err == nil ||
		!strings.HasPrefix(err.Error(), "failed to construct FQDN from pod hostname and cluster domain, FQDN "+long+" is too long (64 characters is the max, 78 characters requested)") {
		t.Errorf("too long: %v", err)
	}
}

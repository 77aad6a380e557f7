package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hostlet/hostlet/test/images/resolver"
	"github.com/hostlet/hostlet/test/images/resolver/dnstest"
)

// The /etc/hosts hostlet writes for a pod with a hostname and subdomain.
const podHosts = `# Kubernetes-managed hosts file.
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
10.244.0.7	dns-querier-1.dns-test-service.e2e.svc.cluster.local	dns-querier-1
`

// Names in /etc/hosts are found there, as glibc prints them; the others
// in DNS, IPv6 first; an unknown name is exit 2.
func TestRun(t *testing.T) {
	srv := dnstest.Start(t, &dnstest.Server{Records: map[string][]string{
		"svc.e2e.svc.cluster.local.": {"svc.e2e.svc.cluster.local. 30 IN A 10.96.3.4"},
		"v6.e2e.svc.cluster.local.":  {"v6.e2e.svc.cluster.local. 30 IN AAAA fd00::5", "v6.e2e.svc.cluster.local. 30 IN A 10.96.3.5"},
		"alias.e2e.svc.cluster.local.": {
			"alias.e2e.svc.cluster.local. 30 IN CNAME svc.e2e.svc.cluster.local.",
			"svc.e2e.svc.cluster.local. 30 IN A 10.96.3.4",
		},
	}})
	dir := t.TempDir()
	hosts, conf := filepath.Join(dir, "hosts"), filepath.Join(dir, "resolv.conf")
	os.WriteFile(hosts, []byte(podHosts), 0o644)
	// resolv.conf has no port: its search list and ndots are read from the
	// file, the server is the test's.
	os.WriteFile(conf, []byte("nameserver 127.0.0.1\nsearch e2e.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644)
	loadConfig = func(path string) (resolver.Config, error) {
		c, err := resolver.Load(path)
		c.Servers = []string{srv.Addr}
		return c, err
	}
	t.Cleanup(func() { loadConfig = resolver.Load })

	getent := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(args, hosts, conf, &out, &errb)
		return out.String(), code
	}
	for _, c := range []struct {
		key, want string
	}{
		{"dns-querier-1.dns-test-service.e2e.svc.cluster.local", "10.244.0.7      dns-querier-1.dns-test-service.e2e.svc.cluster.local dns-querier-1\n"},
		{"dns-querier-1", "10.244.0.7      dns-querier-1.dns-test-service.e2e.svc.cluster.local dns-querier-1\n"},
		{"localhost", "::1             localhost ip6-localhost ip6-loopback\n"},
		{"svc", "10.96.3.4       svc.e2e.svc.cluster.local\n"},
		{"v6", "fd00::5         v6.e2e.svc.cluster.local\n"},
		{"alias.e2e.svc.cluster.local", "10.96.3.4       svc.e2e.svc.cluster.local alias.e2e.svc.cluster.local\n"},
		{"10.244.0.7", "10.244.0.7      dns-querier-1.dns-test-service.e2e.svc.cluster.local dns-querier-1\n"},
	} {
		if out, code := getent("hosts", c.key); out != c.want || code != 0 {
			t.Errorf("getent hosts %s = %q, %d; want %q, 0", c.key, out, code, c.want)
		}
	}
	if out, code := getent("hosts", "nowhere"); out != "" || code != 2 {
		t.Errorf("unknown name: %q, %d; want nothing, 2", out, code)
	}
	if out, code := getent("hosts"); code != 0 || bytes.Count([]byte(out), []byte("\n")) != 4 {
		t.Errorf("enumeration: %q, %d", out, code)
	}
	if _, code := getent("passwd", "root"); code != 1 {
		t.Errorf("unknown database: exit %d, want 1", code)
	}
	if _, code := getent(); code != 1 {
		t.Errorf("no database: exit %d, want 1", code)
	}
}

// res_search's order: a name with ndots dots first as it is, then in the
// search domains; one with fewer the other way round; an absolute one only
// as it is.
func TestCandidates(t *testing.T) {
	cfg := resolver.Config{Search: []string{"e2e.svc.cluster.local", "cluster.local"}, Ndots: 5}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"svc", []string{"svc.e2e.svc.cluster.local.", "svc.cluster.local.", "svc."}},
		{"a.b.c.d.e.f", []string{"a.b.c.d.e.f.", "a.b.c.d.e.f.e2e.svc.cluster.local.", "a.b.c.d.e.f.cluster.local."}},
		{"x.", []string{"x."}},
	} {
		if got := candidates(c.name, cfg); !slices.Equal(got, c.want) {
			t.Errorf("candidates(%q) = %q; want %q", c.name, got, c.want)
		}
	}
}

package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/hostlet/hostlet/test/images/resolver"
	"github.com/hostlet/hostlet/test/images/resolver/dnstest"
)

// The e2e DNS specs' command lines (dns_common.go) parse as BIND's dig
// reads them.
func TestParse(t *testing.T) {
	d := defaults()
	answer := func(name string, qtype uint16, tcp bool) options {
		o := d
		o.name, o.qtype, o.tcp, o.search, o.all = name, qtype, tcp, true, false
		return o
	}
	short := func(name string, qtype uint16) options {
		o := d
		o.name, o.qtype, o.short, o.all = name, qtype, true, false
		return o
	}
	for _, c := range []struct {
		args []string
		want options
	}{
		{[]string{"+notcp", "+noall", "+answer", "+search", "kubernetes.default", "A"}, answer("kubernetes.default", dns.TypeA, false)},
		{[]string{"+tcp", "+noall", "+answer", "+search", "kubernetes.default.svc.cluster.local", "AAAA"}, answer("kubernetes.default.svc.cluster.local", dns.TypeAAAA, true)},
		{[]string{"+notcp", "+noall", "+answer", "+search", "_http._tcp.s.ns.svc", "SRV"}, answer("_http._tcp.s.ns.svc", dns.TypeSRV, false)},
		{[]string{"+tcp", "+noall", "+answer", "+search", "10.0.96.10.in-addr.arpa.", "PTR"}, answer("10.0.96.10.in-addr.arpa.", dns.TypePTR, true)},
		{[]string{"+short", "s.ns.svc.cluster.local", "CNAME"}, short("s.ns.svc.cluster.local", dns.TypeCNAME)},
		{[]string{"+short", "s.ns.svc.cluster.local", "A"}, short("s.ns.svc.cluster.local", dns.TypeA)},
		{[]string{"+short", "-x", "10.96.0.10"}, short("10.0.96.10.in-addr.arpa.", dns.TypePTR)},
		{[]string{"+short", "-t", "srv", "IN", "x"}, short("x", dns.TypeSRV)},
		// A name that reads as a type is a name once the type is given.
		{[]string{"+short", "A", "a"}, short("a", dns.TypeA)},
	} {
		got, err := parse(c.args)
		if err != nil || got != c.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	o, err := parse([]string{"@127.0.0.1", "-p", "5353", "+time=1", "+tries=2", "+ndots=3", "+short", "x"})
	if err != nil || o.server != "127.0.0.1" || o.port != "5353" || o.timeout != time.Second || o.tries != 2 || o.ndots != 3 {
		t.Errorf("server, port, time, tries, ndots: %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"x"},                     // the full output is not implemented
		{"+noall", "+answer"},     // no name
		{"+short", "x", "y"},      // two queries
		{"+short", "+trace", "x"}, // unsupported option
		{"+short", "-q", "x"},     // unsupported flag
		{"+short", "-t", "BOGUS", "x"},
		{"+short", "+tries", "x"}, // no value
		{"+short", "-p", "99999", "x"},
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}

// +search tries the search list first for a name with fewer dots than
// ndots, and only the name itself otherwise (BIND's dighost.c).
func TestCandidates(t *testing.T) {
	cfg := resolver.Config{Search: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Ndots: 5}
	for _, c := range []struct {
		name   string
		search bool
		want   []string
	}{
		{"kubernetes.default", true, []string{
			"kubernetes.default.ns.svc.cluster.local.", "kubernetes.default.svc.cluster.local.",
			"kubernetes.default.cluster.local.", "kubernetes.default."}},
		{"a.b.c.d.e.f", true, []string{"a.b.c.d.e.f."}}, // 5 dots: ndots met
		{"a.b.c.d.e", true, []string{"a.b.c.d.e.ns.svc.cluster.local.", "a.b.c.d.e.svc.cluster.local.", "a.b.c.d.e.cluster.local.", "a.b.c.d.e."}},
		{"x.y.", true, []string{"x.y."}}, // absolute
		{"kubernetes.default", false, []string{"kubernetes.default."}},
	} {
		if got := candidates(c.name, c.search, cfg); !slices.Equal(got, c.want) {
			t.Errorf("candidates(%q, %v) = %q; want %q", c.name, c.search, got, c.want)
		}
	}
	if got := candidates("x", true, resolver.Config{Ndots: 1}); !slices.Equal(got, []string{"x."}) {
		t.Errorf("no search list: %q", got)
	}
}

// Answer lines are in dig's columns: tabs to the TTL (24), class (32), type
// (40) and data (48) columns, a single space once a field is past its
// column.
func TestFormat(t *testing.T) {
	for _, c := range []struct{ rr, want string }{
		{"google.com. 300 IN A 142.250.80.46", "google.com.\t\t300\tIN\tA\t142.250.80.46"},
		{"example.org. 86400 IN AAAA 2001:db8::1", "example.org.\t\t86400\tIN\tAAAA\t2001:db8::1"},
		{"a. 5 IN A 10.0.0.1", "a.\t\t\t5\tIN\tA\t10.0.0.1"},
		{"kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.1", "kubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1"},
		{"_http._tcp.dns-test-service.e2e.svc.cluster.local. 30 IN SRV 0 100 80 dns-querier-1.dns-test-service.e2e.svc.cluster.local.",
			"_http._tcp.dns-test-service.e2e.svc.cluster.local. 30 IN SRV 0 100 80 dns-querier-1.dns-test-service.e2e.svc.cluster.local."},
		{"10.0.96.10.in-addr.arpa. 30 IN PTR kube-dns.kube-system.svc.cluster.local.", "10.0.96.10.in-addr.arpa. 30\tIN\tPTR\tkube-dns.kube-system.svc.cluster.local."},
		// A field ending one short of a tab stop reaches it with a tab.
		{"abcdefghijklmnopqrstuvwxyz0123456789ab. 7 IN A 1.2.3.4", "abcdefghijklmnopqrstuvwxyz0123456789ab.\t7 IN A\t1.2.3.4"},
	} {
		rr, err := dns.NewRR(c.rr)
		if err != nil {
			t.Fatal(err)
		}
		if got := format(rr); got != c.want {
			t.Errorf("format(%s) = %q; want %q", c.rr, got, c.want)
		}
	}
	rr, _ := dns.NewRR("s.ns.svc.cluster.local. 30 IN CNAME foo.example.com.")
	if got := rdata(rr); got != "foo.example.com." {
		t.Errorf("rdata = %q", got)
	}
}

// A run against a real server: the search list walked over NXDOMAIN only,
// UDP or TCP as asked, a truncated UDP answer asked again over TCP, and
// dig's exit codes.
func TestRun(t *testing.T) {
	const ns = "e2e"
	srv := dnstest.Start(t, &dnstest.Server{
		Records: map[string][]string{
			"kubernetes.default.svc.cluster.local.": {"kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.1"},
			"ext.e2e.svc.cluster.local.":            {"ext.e2e.svc.cluster.local. 30 IN CNAME foo.example.com."},
			"big.e2e.svc.cluster.local.":            {"big.e2e.svc.cluster.local. 30 IN A 10.0.0.9"},
			"nodata.e2e.svc.cluster.local.":         {"nodata.e2e.svc.cluster.local. 30 IN TXT \"x\""},
		},
		ServFail: map[string]bool{"broken.e2e.svc.cluster.local.": true},
		Truncate: map[string]bool{"big.e2e.svc.cluster.local.": true},
	})
	host, port, _ := net.SplitHostPort(srv.Addr)
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(conf, []byte("nameserver 192.0.2.1\nsearch "+ns+".svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644)
	dig := func(args ...string) (string, int) {
		t.Helper()
		o, err := parse(append([]string{"@" + host, "-p", port, "+time=2", "+tries=1"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run(o, conf, &out, &errb)
		return out.String(), code
	}
	before := len(srv.Queries())
	out, code := dig("+notcp", "+noall", "+answer", "+search", "kubernetes.default", "A")
	if want := "kubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1\n"; out != want || code != 0 {
		t.Errorf("+search kubernetes.default = %q, %d; want %q, 0", out, code, want)
	}
	if got, want := srv.Queries()[before:], []string{
		"udp kubernetes.default.e2e.svc.cluster.local. A", "udp kubernetes.default.svc.cluster.local. A",
	}; !slices.Equal(got, want) {
		t.Errorf("queries %q; want %q", got, want)
	}
	before = len(srv.Queries())
	if out, code = dig("+tcp", "+noall", "+answer", "+search", "kubernetes.default.svc.cluster.local", "A"); out == "" || code != 0 {
		t.Errorf("+tcp: %q, %d", out, code)
	}
	if q := srv.Queries()[before]; q != "tcp kubernetes.default.svc.cluster.local.e2e.svc.cluster.local. A" {
		t.Errorf("+tcp asked %q", q)
	}
	// Without +search the name is asked as it is, and NXDOMAIN is an answer.
	if out, code = dig("+noall", "+answer", "kubernetes.default", "A"); out != "" || code != 0 {
		t.Errorf("no +search: %q, %d; want nothing, 0", out, code)
	}
	// NOERROR without records and SERVFAIL end the search.
	before = len(srv.Queries())
	if out, code = dig("+noall", "+answer", "+search", "nodata", "A"); out != "" || code != 0 || len(srv.Queries())-before != 1 {
		t.Errorf("NODATA: %q, %d, %d queries; want nothing, 0, 1 query", out, code, len(srv.Queries())-before)
	}
	before = len(srv.Queries())
	if _, code = dig("+noall", "+answer", "+search", "broken", "A"); code != 0 || len(srv.Queries())-before != 1 {
		t.Errorf("SERVFAIL: %d, %d queries; want 0, 1 query", code, len(srv.Queries())-before)
	}
	if out, _ = dig("+short", "ext.e2e.svc.cluster.local", "CNAME"); out != "foo.example.com.\n" {
		t.Errorf("+short CNAME = %q", out)
	}
	before = len(srv.Queries())
	if out, _ = dig("+short", "big.e2e.svc.cluster.local"); out != "10.0.0.9\n" {
		t.Errorf("truncated: %q", out)
	}
	if got := srv.Queries()[before:]; !slices.Equal(got, []string{"udp big.e2e.svc.cluster.local. A", "tcp big.e2e.svc.cluster.local. A"}) {
		t.Errorf("truncated: queries %q", got)
	}
	// No server: exit 9.
	l, _ := net.ListenPacket("udp", "127.0.0.1:0")
	deadPort := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	o, _ := parse([]string{"@127.0.0.1", "-p", strconv.Itoa(deadPort), "+tcp", "+tries=1", "+time=1", "+short", "x"})
	if code := run(o, conf, &bytes.Buffer{}, &bytes.Buffer{}); code != 9 {
		t.Errorf("no server: exit %d, want 9", code)
	}
}

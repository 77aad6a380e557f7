// Command getent is the stand-in for glibc's `getent hosts` in the
// conformance images (busybox has none): the e2e DNS specs' probe pods run
// `test -n "$(getent hosts NAME)"` to check the pod's /etc/hosts and DNS.
//
// `getent hosts [KEY...]` looks each name up as glibc's getent does with
// `hosts: files dns`: gethostbyname2 for IPv6, then for IPv4, each first in
// /etc/hosts, then in DNS through resolv.conf's servers and search list in
// res_search's order. An address key is looked up in /etc/hosts only (no
// reverse DNS). Without a key it lists /etc/hosts. Each address found is
// printed as glibc prints a hostent: the address padded to 15, the
// canonical name and its aliases. Exit status: 0 found, 1 bad usage or an
// unknown database, 2 a key not found.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/hostlet/hostlet/test/images/resolver"
)

const hostsFile = "/etc/hosts"

// loadConfig reads resolv.conf (a variable: tests point it at their server,
// resolv.conf having no port).
var loadConfig = resolver.Load

func main() {
	os.Exit(run(os.Args[1:], hostsFile, resolver.ResolvConf, os.Stdout, os.Stderr))
}

func run(args []string, hosts, resolvConf string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "Usage: getent hosts [KEY...]")
		return 1
	}
	if args[0] != "hosts" {
		fmt.Fprintf(stderr, "Unknown database: %s\n", args[0])
		return 1
	}
	entries, err := readHosts(hosts)
	if err != nil && !os.IsNotExist(err) {
		fmt.Fprintln(stderr, "getent:", err)
		return 1
	}
	if len(args) == 1 {
		for _, e := range entries {
			printHost(stdout, e)
		}
		return 0
	}
	for _, key := range args[1:] {
		h, ok := lookup(key, entries, resolvConf)
		if !ok {
			return 2
		}
		printHost(stdout, h)
	}
	return 0
}

// host is a hostent: its addresses, canonical name and aliases.
type host struct {
	addrs   []netip.Addr
	name    string
	aliases []string
}

// printHost prints h as glibc getent's print_hosts.
func printHost(w io.Writer, h host) {
	for _, a := range h.addrs {
		fmt.Fprintf(w, "%-15s %s", a, h.name)
		for _, al := range h.aliases {
			fmt.Fprint(w, " ", al)
		}
		fmt.Fprintln(w)
	}
}

// readHosts parses an /etc/hosts: one entry per line, comments dropped.
func readHosts(path string) ([]host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []host
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		out = append(out, host{addrs: []netip.Addr{a.Unmap()}, name: fields[1], aliases: fields[2:]})
	}
	return out, sc.Err()
}

func lookup(key string, entries []host, resolvConf string) (host, bool) {
	if a, err := netip.ParseAddr(key); err == nil {
		for _, e := range entries {
			if e.addrs[0] == a.Unmap() {
				return e, true
			}
		}
		return host{}, false
	}
	for _, v6 := range []bool{true, false} {
		if h, ok := fromFiles(key, entries, v6); ok {
			return h, true
		}
		if h, ok := fromDNS(key, v6, resolvConf); ok {
			return h, true
		}
	}
	return host{}, false
}

// fromFiles is nss_files' answer: the first entry of the family that has
// key as its name or an alias, with the addresses of every such entry
// (glibc merges them).
func fromFiles(key string, entries []host, v6 bool) (host, bool) {
	var h host
	for _, e := range entries {
		if e.addrs[0].Is6() != v6 || !e.named(key) {
			continue
		}
		if h.name == "" {
			h.name, h.aliases = e.name, e.aliases
		}
		h.addrs = append(h.addrs, e.addrs[0])
	}
	return h, h.name != ""
}

func (h host) named(key string) bool {
	if strings.EqualFold(h.name, key) {
		return true
	}
	for _, a := range h.aliases {
		if strings.EqualFold(a, key) {
			return true
		}
	}
	return false
}

// fromDNS is nss_dns' answer: the A or AAAA records of the first name of
// res_search's order that has some. A CNAME's target is the canonical name,
// the names that led to it are its aliases.
func fromDNS(key string, v6 bool, resolvConf string) (host, bool) {
	cfg, err := loadConfig(resolvConf)
	if err != nil {
		return host{}, false
	}
	qtype := dns.TypeA
	if v6 {
		qtype = dns.TypeAAAA
	}
	client := resolver.Client{Servers: cfg.Servers, Timeout: 5 * time.Second, Tries: 2}
	for _, name := range candidates(key, cfg) {
		q := new(dns.Msg)
		q.SetQuestion(name, qtype)
		q.RecursionDesired = true
		r, err := client.Exchange(q)
		if err != nil {
			return host{}, false // TRY_AGAIN without an answer: res_search stops
		}
		switch r.Rcode {
		case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure:
		default:
			return host{}, false // NO_RECOVERY: res_search stops
		}
		if h, ok := answer(r, name, qtype); ok {
			return h, true
		}
	}
	return host{}, false
}

// answer reads a hostent out of a response to name.
func answer(r *dns.Msg, name string, qtype uint16) (host, bool) {
	h := host{name: strings.TrimSuffix(name, ".")}
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.CNAME:
			h.aliases = append(h.aliases, h.name)
			h.name = strings.TrimSuffix(rr.Target, ".")
		case *dns.A:
			if qtype == dns.TypeA {
				h.addrs = append(h.addrs, netip.AddrFrom4([4]byte(rr.A.To4())))
			}
		case *dns.AAAA:
			if qtype == dns.TypeAAAA {
				h.addrs = append(h.addrs, netip.AddrFrom16([16]byte(rr.AAAA.To16())))
			}
		}
	}
	return h, len(h.addrs) > 0
}

// candidates are the names res_search tries, in its order: as it is
// first when it has at least ndots dots (or ends in a dot: then only so),
// then in each search domain, then as it is if not tried yet.
func candidates(name string, cfg resolver.Config) []string {
	asIs := resolver.Join(name, "")
	if resolver.Absolute(name) {
		return []string{asIs}
	}
	var out []string
	first := resolver.Dots(name) >= cfg.Ndots
	if first {
		out = append(out, asIs)
	}
	for _, d := range cfg.Search {
		out = append(out, resolver.Join(name, d))
	}
	if !first {
		out = append(out, asIs)
	}
	return out
}

package podspec

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits the kubelet applies to resolv.conf.
const (
	maxNameservers = 3
	maxSearch      = 32
)

type dnsConfig struct {
	nameservers, searches, options []string
}

func parseResolvConf(b []byte) dnsConfig {
	var c dnsConfig
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				c.nameservers = append(c.nameservers, f[1])
			}
		case "search":
			c.searches = f[1:]
		case "options":
			c.options = append(c.options, f[1:]...)
		}
	}
	return c
}

// podHostname returns the pod's hostname and, with a subdomain, its FQDN.
// A hostnameOverride (the kubelet's HostnameOverride gate, on by default
// in 1.35) is the hostname as given, with no FQDN: the pod's /etc/hosts and
// UTS namespace carry it alone.
func (r *Runtime) podHostname(pod *v1.Pod) (string, string) {
	if o := pod.Spec.HostnameOverride; o != nil && r.gate("HostnameOverride") {
		return truncateHostname(*o), ""
	}
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	h = truncateHostname(h)
	if pod.Spec.Subdomain == "" {
		return h, ""
	}
	return h, fmt.Sprintf("%s.%s.%s.svc.%s", h, pod.Spec.Subdomain, pod.Namespace, r.cfg.ClusterDomain)
}

// kernelHostname is the sandbox's hostname: the FQDN with
// setHostnameAsFQDN, refused beyond the kernel's 64-byte nodename in the
// kubelet's words (its GetNodenameForKernel), before any sandbox is made.
func kernelHostname(hostname, fqdn string, asFQDN *bool) (string, error) {
	const fqdnMaxLen = 64
	if fqdn == "" || asFQDN == nil || !*asFQDN {
		return hostname, nil
	}
	if len(fqdn) > fqdnMaxLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, fqdnMaxLen, len(fqdn))
	}
	return fqdn, nil
}

// truncateHostname keeps a hostname within 63 characters, as the
// kubelet's truncatePodHostnameIfNeeded: cut, then no trailing '-' or '.'.
func truncateHostname(h string) string {
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// checkHostname refuses what the kubelet's GeneratePodHostNameAndDomain
// refuses, in its words: a hostnameOverride that is no DNS subdomain, or
// a hostname that truncates to nothing.
func (r *Runtime) checkHostname(pod *v1.Pod) error {
	if o := pod.Spec.HostnameOverride; o != nil && r.gate("HostnameOverride") {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		if h, _ := r.podHostname(pod); h == "" {
			return fmt.Errorf("hostname for pod %q was invalid: %q", pod.Name, *o)
		}
	}
	return nil
}

// resolvConf renders the pod's /etc/resolv.conf for its dnsPolicy.
func (r *Runtime) resolvConf(pod *v1.Pod) string {
	host, _ := os.ReadFile(r.cfg.ResolvConf)
	hostCfg := parseResolvConf(host)
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}
	if policy == v1.DNSClusterFirstWithHostNet {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && len(r.cfg.ClusterDNS) == 0 {
		r.event(pod, "", v1.EventTypeWarning, "MissingClusterDNS",
			fmt.Sprintf("pod: %q. kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.",
				pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", v1.DNSClusterFirst, v1.DNSDefault))
		policy = v1.DNSDefault
	}
	var c dnsConfig
	switch policy {
	case v1.DNSClusterFirst:
		d := r.cfg.ClusterDomain
		c.nameservers = append([]string{}, r.cfg.ClusterDNS...)
		c.searches = hostCfg.searches
		if d != "" {
			// Without a cluster domain the kubelet adds no search of its own.
			c.searches = append([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, hostCfg.searches...)
		}
		c.options = []string{"ndots:5"}
	case v1.DNSDefault:
		c = hostCfg
	case v1.DNSNone:
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		c.nameservers = append(c.nameservers, dc.Nameservers...)
		c.searches = append(c.searches, dc.Searches...)
		for _, o := range dc.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			c.options = mergeOption(c.options, o.Name, opt)
		}
	}
	c.nameservers = dedup(c.nameservers)
	if len(c.nameservers) > maxNameservers {
		c.nameservers = c.nameservers[:maxNameservers]
	}
	c.searches = dedup(c.searches)
	if len(c.searches) > maxSearch {
		c.searches = c.searches[:maxSearch]
	}
	// The layout containerd's CRI writes for the kubelet: search first.
	var b strings.Builder
	if len(c.searches) > 0 {
		b.WriteString("search " + strings.Join(c.searches, " ") + "\n")
	}
	for _, n := range c.nameservers {
		b.WriteString("nameserver " + n + "\n")
	}
	if len(c.options) > 0 {
		b.WriteString("options " + strings.Join(c.options, " ") + "\n")
	}
	return b.String()
}

func mergeOption(opts []string, name, opt string) []string {
	for i, o := range opts {
		if strings.SplitN(o, ":", 2)[0] == name {
			opts[i] = opt
			return opts
		}
	}
	return append(opts, opt)
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

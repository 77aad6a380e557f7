package node

import (
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/node/util/sysctl"
)

// safeSysctls are the kubelet's namespaced sysctls allowed by default, with
// the namespace each one lives in.
var safeSysctls = map[string]sysctl.Namespace{
	"kernel.shm_rmid_forced":              sysctl.IPCNamespace,
	"net.ipv4.ip_local_port_range":        sysctl.NetNamespace,
	"net.ipv4.tcp_syncookies":             sysctl.NetNamespace,
	"net.ipv4.ping_group_range":           sysctl.NetNamespace,
	"net.ipv4.ip_unprivileged_port_start": sysctl.NetNamespace,
	"net.ipv4.ip_local_reserved_ports":    sysctl.NetNamespace,
	"net.ipv4.tcp_keepalive_time":         sysctl.NetNamespace,
	"net.ipv4.tcp_fin_timeout":            sysctl.NetNamespace,
	"net.ipv4.tcp_keepalive_intvl":        sysctl.NetNamespace,
	"net.ipv4.tcp_keepalive_probes":       sysctl.NetNamespace,
	"net.ipv4.tcp_rmem":                   sysctl.NetNamespace,
	"net.ipv4.tcp_wmem":                   sysctl.NetNamespace,
}

// NormalizeSysctl turns "net/ipv4/tcp_rmem" into "net.ipv4.tcp_rmem": a name
// whose first separator is a slash has its dots and slashes swapped.
func NormalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '/':
			return '.'
		case '.':
			return '/'
		}
		return r
	}, name)
}

// SysctlAllowlist is the kubelet's sysctl admission: the safe sysctls and
// the --allowed-unsafe-sysctls patterns (a name, or a prefix ending in *),
// each of a namespace the pod has its own of.
type SysctlAllowlist struct {
	names, prefixes map[string]sysctl.Namespace
}

// sysctlPattern is the kubelet's valid sysctl pattern (policy validation's
// IsValidSysctlPattern): dot- or slash-separated segments, the last may end
// in *.
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

// NewSysctlAllowlist is the safe sysctls and unsafe, refused with the
// kubelet's messages when a pattern is not valid or not of a namespace
// (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*).
func NewSysctlAllowlist(unsafe []string) (*SysctlAllowlist, error) {
	w := &SysctlAllowlist{names: map[string]sysctl.Namespace{}, prefixes: map[string]sysctl.Namespace{}}
	for name, ns := range safeSysctls {
		w.names[name] = ns
	}
	for _, p := range unsafe {
		if len(p) > 253 || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("sysctl %q must have at most 253 characters and match regex %s", p, sysctlPattern)
		}
		ns, nameOrPrefix, prefixed := sysctl.GetNamespace(p)
		if ns == sysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", nameOrPrefix)
		}
		if prefixed {
			w.prefixes[nameOrPrefix] = ns
		} else {
			w.names[nameOrPrefix] = ns
		}
	}
	return w, nil
}

// validate says why a pod may not set name (nil: it may).
func (w *SysctlAllowlist) validate(name string, hostNet, hostIPC bool) error {
	name = sysctl.NormalizeName(name)
	ns, ok := w.names[name]
	if !ok {
		for p, pns := range w.prefixes {
			if strings.HasPrefix(name, p) {
				ns, ok = pns, true
				break
			}
		}
	}
	switch {
	case !ok:
		return fmt.Errorf("%q not allowlisted", name)
	case ns == sysctl.IPCNamespace && hostIPC, ns == sysctl.NetNamespace && hostNet:
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}

// admit refuses pods asking for sysctls outside the allowlist, or for
// sysctls of a namespace they share with the host, with the kubelet's
// reason and message. A nil allowlist is the safe sysctls only.
func (w *SysctlAllowlist) admit(pod *v1.Pod) (string, string, bool) {
	sc := pod.Spec.SecurityContext
	if sc == nil || len(sc.Sysctls) == 0 {
		return "", "", true
	}
	if w == nil {
		w = safeAllowlist
	}
	for _, s := range sc.Sysctls {
		if err := w.validate(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC); err != nil {
			return "SysctlForbidden", fmt.Sprintf("forbidden sysctl: %v", err), false
		}
	}
	return "", "", true
}

var safeAllowlist, _ = NewSysctlAllowlist(nil)

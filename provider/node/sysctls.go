package node

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// safeSysctls are the kubelet's namespaced sysctls allowed by default, with
// the namespace each one lives in.
var safeSysctls = map[string]string{
	"kernel.shm_rmid_forced":              "ipc",
	"net.ipv4.ip_local_port_range":        "net",
	"net.ipv4.tcp_syncookies":             "net",
	"net.ipv4.ping_group_range":           "net",
	"net.ipv4.ip_unprivileged_port_start": "net",
	"net.ipv4.ip_local_reserved_ports":    "net",
	"net.ipv4.tcp_keepalive_time":         "net",
	"net.ipv4.tcp_fin_timeout":            "net",
	"net.ipv4.tcp_keepalive_intvl":        "net",
	"net.ipv4.tcp_keepalive_probes":       "net",
	"net.ipv4.tcp_rmem":                   "net",
	"net.ipv4.tcp_wmem":                   "net",
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

// admitSysctls refuses pods asking for sysctls outside the allowlist, or
// for sysctls of a namespace they share with the host.
func admitSysctls(pod *v1.Pod) (string, string, bool) {
	sc := pod.Spec.SecurityContext
	if sc == nil {
		return "", "", true
	}
	for _, s := range sc.Sysctls {
		name := NormalizeSysctl(s.Name)
		ns, ok := safeSysctls[name]
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("%q not allowlisted", name)
		case ns == "ipc" && pod.Spec.HostIPC, ns == "net" && pod.Spec.HostNetwork:
			err = fmt.Errorf("%q not allowed with host %s enabled", name, ns)
		}
		if err != nil {
			return "SysctlForbidden", fmt.Sprintf("forbidden sysctl: %v", err), false
		}
	}
	return "", "", true
}

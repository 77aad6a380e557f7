package runtime

import (
	"fmt"
	"path"
	"strings"

	"github.com/opencontainers/cgroups/systemd"
)

// CgroupName is a cgroup as the kubelet names it, independent of the
// driver: its components from the root, e.g. {"kubepods", "burstable",
// "pod<uid>"}. Components hold no "/" and no "_" (systemd's "-" becomes
// "_" in slice names, which must map back).
type CgroupName []string

// ParseCgroupfsName is the name of a cgroupfs path such as --cgroup-root.
func ParseCgroupfsName(p string) CgroupName {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		return CgroupName{}
	}
	return CgroupName(parts)
}

// Child is the name one level below n.
func (n CgroupName) Child(component string) CgroupName {
	if strings.ContainsAny(component, "/_") {
		panic(fmt.Errorf("invalid character in component %q of a cgroup name", component))
	}
	return append(append(CgroupName{}, n...), component)
}

// ToCgroupfs is the cgroupfs driver's path, "/kubepods/burstable/pod<uid>".
func (n CgroupName) ToCgroupfs() string { return "/" + path.Join(n...) }

// ToSystemd is the systemd driver's path, expanded into the cgroupfs form:
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice".
func (n CgroupName) ToSystemd() string {
	if len(n) == 0 || (len(n) == 1 && n[0] == "") {
		return "/"
	}
	parts := make([]string, len(n))
	for i, p := range n {
		parts[i] = strings.ReplaceAll(p, "-", "_")
	}
	out, err := systemd.ExpandSlice(strings.Join(parts, "-") + ".slice")
	if err != nil {
		// Only names with "/" in a component fail, which Child refuses.
		panic(fmt.Errorf("cgroup name %v as a systemd slice: %w", n, err))
	}
	return out
}

// containerCgroupsPath is a container's linux.cgroupsPath below its pod's
// cgroup (parent, in the driver's form), as containerd's CRI writes it:
// "slice:prefix:name" for runc's systemd driver, a path for cgroupfs. The
// prefix is CRI's, so tools that recognise cri-containerd-<id>.scope
// (cAdvisor, node agents) see hostlet's containers the same way. A systemd
// parent that is no slice (the root without --cgroups-per-qos) leaves the
// slice empty: runc's default, system.slice.
func containerCgroupsPath(parent, id string, systemd bool) string {
	if !systemd {
		return path.Join(parent, id)
	}
	slice := path.Base(parent)
	if !strings.HasSuffix(slice, ".slice") {
		slice = ""
	}
	return strings.Join([]string{slice, "cri-containerd", id}, ":")
}

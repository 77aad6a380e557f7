package runtime

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Security is a container's effective security context.
type Security struct {
	RunAsUser, RunAsGroup *int64
	// SupplementalGroups include the pod's fsGroup.
	SupplementalGroups []int64
	// StrictGroups is supplementalGroupsPolicy Strict: the process gets
	// its gid and SupplementalGroups only, not the groups the image's
	// /etc/group gives its user (Merge, the default, adds those).
	StrictGroups    bool
	ReadOnlyRootFS  bool
	Privileged      bool
	NoNewPrivileges bool
	CapAdd, CapDrop []string
	Sysctls         map[string]string
	// Seccomp is "" or "Unconfined" (none, the kubelet's default),
	// "RuntimeDefault", or the path of a localhost profile.
	Seccomp string
	// AppArmor is "" (not set: the runtime's default), "Unconfined",
	// "RuntimeDefault", or the name of a loaded profile.
	AppArmor string
	// UnmaskedProc is procMount Unmasked; honoured only in a user namespace.
	UnmaskedProc bool

	// withoutHostDevices keeps the host's devices out of a privileged
	// container, allDevicesAllowed then still allows them all in its
	// device cgroup: its runtime handler's privileged_without_host_devices
	// (and _all_devices_allowed), as CRI applies them.
	withoutHostDevices, allDevicesAllowed bool
}

// Resources are a container's cgroup settings.
type Resources struct {
	CPUShares   uint64
	CPUQuota    int64
	CPUPeriod   uint64
	MemoryLimit int64
	// MemorySwap is OCI's memory+swap limit (cgroup v1; 0: unset).
	MemorySwap int64
	// Unified are cgroup v2 files set as given (memory.swap.max).
	Unified map[string]string
	// OOMScoreAdj as the kubelet computes it per QoS class; raised to
	// hostlet's own value when lower, as containerd's restrict_oom_score_adj
	// does (lowering it needs CAP_SYS_RESOURCE).
	OOMScoreAdj int
}

// Seccomp and AppArmor profiles, as the kubelet hands them to CRI.
const (
	ProfileRuntimeDefault = "RuntimeDefault"
	ProfileUnconfined     = "Unconfined"
)

// securityOpts turns a security context into spec options as containerd's
// CRI does. inUserNS: the container runs in its pod's user namespace, the
// only place where procMount Unmasked may leave /proc unmasked.
func securityOpts(sec Security, inUserNS bool) []oci.SpecOpts {
	var opts []oci.SpecOpts
	switch {
	case sec.RunAsUser != nil && sec.RunAsGroup != nil:
		opts = append(opts, oci.WithUIDGID(uint32(*sec.RunAsUser), uint32(*sec.RunAsGroup)))
	case sec.RunAsUser != nil:
		opts = append(opts, oci.WithUserID(uint32(*sec.RunAsUser)))
	case sec.RunAsGroup != nil:
		opts = append(opts, withGID(uint32(*sec.RunAsGroup)))
	}
	switch {
	case sec.StrictGroups:
		// After the image config and the user: whatever they read from the
		// image's /etc/group is replaced.
		opts = append(opts, withStrictGIDs(sec.SupplementalGroups))
	default:
		if sec.RunAsUser != nil {
			// Groups of the user from the image's /etc/group, as CRI adds them.
			opts = append(opts, oci.WithAdditionalGIDs(strconv.FormatInt(*sec.RunAsUser, 10)))
		}
		if len(sec.SupplementalGroups) > 0 {
			opts = append(opts, withExtraGIDs(sec.SupplementalGroups))
		}
	}
	if sec.Privileged {
		opts = append(opts, oci.WithPrivileged)
		switch {
		case !sec.withoutHostDevices:
			opts = append(opts, oci.WithAllDevicesAllowed, oci.WithHostDevices)
		case sec.allDevicesAllowed:
			opts = append(opts, oci.WithAllDevicesAllowed)
		}
		opts = append(opts, oci.WithMaskedPaths(nil), oci.WithReadonlyPaths(nil), withWritableSysfs)
	} else {
		opts = append(opts, capabilityOpts(capNames(sec.CapAdd), capNames(sec.CapDrop))...)
		// containerd's default spec masks and write-protects the /proc
		// paths the kubelet lists; Unmasked lifts that only where the
		// container's root is not the host's.
		if sec.UnmaskedProc && inUserNS {
			opts = append(opts, oci.WithMaskedPaths(nil), oci.WithReadonlyPaths(nil))
		}
	}
	if sec.ReadOnlyRootFS {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	// containerd's default spec sets no_new_privs; Kubernetes sets it only
	// when allowPrivilegeEscalation is false, as CRI does.
	if sec.NoNewPrivileges {
		opts = append(opts, oci.WithNoNewPrivileges)
	} else {
		opts = append(opts, oci.WithNewPrivileges)
	}
	if len(sec.Sysctls) > 0 {
		opts = append(opts, withSysctls(sec.Sysctls))
	}
	opts = append(opts, appArmorOpt(sec.AppArmor, sec.Privileged, appArmorRuntimeEnabled()))
	// Last: the default seccomp profile depends on the capabilities.
	switch sec.Seccomp {
	case "", ProfileUnconfined:
		opts = append(opts, oci.WithSeccompUnconfined)
	case ProfileRuntimeDefault:
		if !sec.Privileged {
			opts = append(opts, seccomp.WithDefaultProfile())
		}
	default:
		if !sec.Privileged {
			opts = append(opts, seccomp.WithProfile(sec.Seccomp))
		}
	}
	return opts
}

// withCPUCFS sets the CFS quota and period that are not 0, as containerd's
// CRI applies the kubelet's (WithResources): the kubelet sends the period
// whenever it enforces quotas, with a quota only for a CPU limit.
func withCPUCFS(quota int64, period uint64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			return nil
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		if s.Linux.Resources.CPU == nil {
			s.Linux.Resources.CPU = &specs.LinuxCPU{}
		}
		if period != 0 {
			s.Linux.Resources.CPU.Period = &period
		}
		if quota != 0 {
			s.Linux.Resources.CPU.Quota = &quota
		}
		return nil
	}
}

func resourceOpts(r Resources) []oci.SpecOpts {
	opts := []oci.SpecOpts{oci.WithCPUShares(r.CPUShares)}
	if r.CPUQuota != 0 || r.CPUPeriod != 0 {
		opts = append(opts, withCPUCFS(r.CPUQuota, r.CPUPeriod))
	}
	if r.MemoryLimit > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(r.MemoryLimit)))
	}
	if r.MemorySwap != 0 {
		opts = append(opts, oci.WithMemorySwap(r.MemorySwap))
	}
	if len(r.Unified) > 0 {
		opts = append(opts, withUnified(r.Unified))
	}
	adj := r.OOMScoreAdj
	if own := ownOOMScoreAdj(); adj < own {
		adj = own
	}
	return append(opts, withOOMScoreAdj(adj))
}

// withUnified sets cgroup v2 files (linux.resources.unified), which runc
// writes after converting the v1-style resources.
func withUnified(files map[string]string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		if s.Linux.Resources.Unified == nil {
			s.Linux.Resources.Unified = map[string]string{}
		}
		for k, v := range files {
			s.Linux.Resources.Unified[k] = v
		}
		return nil
	}
}

func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// capabilityOpts applies add and drop as CRI does: "ALL" in add grants every
// capability, "ALL" in drop starts from none; then the named ones.
func capabilityOpts(add, drop []string) []oci.SpecOpts {
	var opts []oci.SpecOpts
	if slices.Contains(add, "ALL") {
		opts = append(opts, oci.WithAllKnownCapabilities)
	}
	if slices.Contains(drop, "ALL") {
		opts = append(opts, oci.WithCapabilities(nil))
	}
	var named []string
	for _, c := range add {
		if c != "ALL" {
			named = append(named, c)
		}
	}
	if len(named) > 0 {
		opts = append(opts, oci.WithAddedCapabilities(named))
	}
	named = nil
	for _, c := range drop {
		if c != "ALL" {
			named = append(named, c)
		}
	}
	if len(named) > 0 {
		opts = append(opts, oci.WithDroppedCapabilities(named))
	}
	return opts
}

func capNames(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		c = strings.ToUpper(c)
		if c == "ALL" {
			out = append(out, "ALL")
			continue
		}
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	return out
}

func withGID(gid uint32) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.User.GID = gid
		return nil
	}
}

// withExtraGIDs merges the pod's groups into the process's, in ascending
// order without repeats, as containerd's CRI's WithSupplementalGroups
// (mergeGids).
func withExtraGIDs(groups []int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		gids := slices.Clone(s.Process.User.AdditionalGids)
		for _, g := range groups {
			gids = append(gids, uint32(g))
		}
		slices.Sort(gids)
		s.Process.User.AdditionalGids = slices.Compact(gids)
		return nil
	}
}

// withStrictGIDs gives the process its gid and groups, nothing else, in
// ascending order, as CRI's Strict policy does (WithUser's gid merged with
// the pod's groups).
func withStrictGIDs(groups []int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		gids := []uint32{s.Process.User.GID}
		for _, g := range groups {
			gids = append(gids, uint32(g))
		}
		slices.Sort(gids)
		s.Process.User.AdditionalGids = slices.Compact(gids)
		return nil
	}
}

func withSysctls(sysctls map[string]string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Sysctl == nil {
			s.Linux.Sysctl = map[string]string{}
		}
		for k, v := range sysctls {
			s.Linux.Sysctl[k] = v
		}
		return nil
	}
}

func withOOMScoreAdj(adj int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.OOMScoreAdj = &adj
		return nil
	}
}

// withWritableSysfs mounts /sys read-write for privileged containers.
func withWritableSysfs(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	for i, m := range s.Mounts {
		if m.Destination == "/sys" {
			var opts []string
			for _, o := range m.Options {
				if o != "ro" {
					opts = append(opts, o)
				}
			}
			s.Mounts[i].Options = append(opts, "rw")
		}
	}
	return nil
}

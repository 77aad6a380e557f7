package runtime

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// specFor builds the OCI spec options of a container: containerd's defaults
// (the same as CRI's), the image config, then what the pod spec says.
// cgroupV2 is the host's hierarchy, which decides the cgroup namespace.
func specFor(cfg ContainerConfig, args []string, termLog string, cgroupV2 bool) []oci.SpecOpts {
	s := cfg.Sandbox
	opts := []oci.SpecOpts{
		oci.WithImageConfig(cfg.Image.image),
		oci.WithProcessArgs(args...),
	}
	if cfg.TTY {
		// process.terminal, and TERM=xterm unless the pod sets TERM.
		opts = append(opts, oci.WithTTY)
	}
	opts = append(opts, oci.WithEnv(cfg.Env))
	if cfg.WorkingDir != "" {
		opts = append(opts, oci.WithProcessCwd(cfg.WorkingDir))
	}
	opts = append(opts, namespaceOpts(s, cfg.Hostname)...)
	if cfg.PIDNamespace != "" {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.PIDNamespace, Path: cfg.PIDNamespace}))
	}
	opts = append(opts, securityOpts(cfg.Security, s.UserNSPath != "")...)
	// A cgroup namespace hides the host's hierarchy on v2, so that the
	// container's /sys/fs/cgroup is its own cgroup (memory.max at the top,
	// what JVMs, Go and .NET size themselves by), as CRI gives every
	// unprivileged container there; v1 and privileged ones share the host's.
	cgroupNS := cgroupV2 && !cfg.Security.Privileged
	if cgroupNS {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace}))
	}
	opts = append(opts, resourceOpts(cfg.Resources)...)
	opts = append(opts, withCgroupParent(s.CgroupParent))
	// The cgroup filesystem, as CRI mounts it for every container:
	// read-only unless privileged.
	cgroupMode := "ro"
	if cfg.Security.Privileged {
		cgroupMode = "rw"
	}
	cgroupOpts := []string{"nosuid", "noexec", "nodev", "relatime", cgroupMode}
	if cgroupV2 && !cgroupNS {
		// In the host's cgroup namespace the mount is the host's one cgroup2
		// superblock, whose options it would set: keep the host's
		// nsdelegate and memory_recursiveprot, which systemd relies on, as
		// CRI does.
		cgroupOpts = append(cgroupOpts, hostCgroup2Opts()...)
	}
	mounts := []specs.Mount{
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: cgroupOpts},
		bind(s.HostsPath(), "/etc/hosts", false),
		bind(s.ResolvConfPath(), "/etc/resolv.conf", false),
		bind(s.HostnamePath(), "/etc/hostname", false),
	}
	if s.HostIPC {
		mounts = append(mounts, bind("/dev/shm", "/dev/shm", false))
	} else if isMountPoint(s.ShmPath()) {
		mounts = append(mounts, bind(s.ShmPath(), "/dev/shm", false))
	}
	if termLog != "" {
		mounts = append(mounts, bind(termLog, cfg.TerminationMessagePath, false))
	}
	base := len(mounts)
	for _, m := range cfg.Mounts {
		b := bind(m.HostPath, m.ContainerPath, m.ReadOnly)
		b.Options[1] = m.Propagation.option() // in place of bind's rprivate
		if m.RecursiveReadOnly && m.ReadOnly {
			// runc's recursive read-only in place of "ro", as CRI passes it.
			b.Options[len(b.Options)-1] = "rro"
		}
		mounts = append(mounts, b)
	}
	if s.IDMap != nil {
		idmapMounts(mounts, *s.IDMap)
		for i, m := range cfg.Mounts {
			if m.IDMapped {
				mounts[base+i].UIDMappings, mounts[base+i].GIDMappings = nil, nil
			}
		}
	}
	opts = append(opts, oci.WithMounts(mounts), withPropagation(cfg.Mounts, mount.Lookup))
	return opts
}

// option is the propagation as a bind mount's option in the OCI spec.
func (p Propagation) option() string {
	switch p {
	case PropagationHostToContainer:
		return "rslave"
	case PropagationBidirectional:
		return "rshared"
	}
	return "rprivate"
}

// withPropagation checks, as CRI does, that the host path of a mount that
// propagates is on a mount that can propagate (shared for Bidirectional,
// shared or slave for HostToContainer: a private one would silently give
// the container nothing), and sets the container's root propagation as CRI
// does: a bind in the container joins the host's peer group only through
// copies of the host's mounts that are still its peers, which runc's
// default root propagation (rslave) makes slaves: the container's mounts
// would never reach the host. rshared for a Bidirectional mount, rslave
// (runc's default, said explicitly as CRI does) for HostToContainer.
func withPropagation(mounts []Mount, lookup func(string) (mount.Info, error)) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		for _, m := range mounts {
			if m.Propagation == PropagationPrivate {
				continue
			}
			info, err := lookup(m.HostPath)
			if err != nil {
				return err
			}
			shared, slave := false, false
			for _, opt := range strings.Fields(info.Optional) {
				shared = shared || strings.HasPrefix(opt, "shared:")
				slave = slave || strings.HasPrefix(opt, "master:")
			}
			if s.Linux == nil {
				s.Linux = &specs.Linux{}
			}
			switch m.Propagation {
			case PropagationBidirectional:
				if !shared {
					return fmt.Errorf("path %q is mounted on %q but it is not a shared mount", m.HostPath, info.Mountpoint)
				}
				s.Linux.RootfsPropagation = "rshared"
			case PropagationHostToContainer:
				if !shared && !slave {
					return fmt.Errorf("path %q is mounted on %q but it is not a shared or slave mount", m.HostPath, info.Mountpoint)
				}
				if s.Linux.RootfsPropagation != "rshared" {
					s.Linux.RootfsPropagation = "rslave"
				}
			}
		}
		return nil
	}
}

// namespaceOpts puts the container into its pod's namespaces: the pinned
// network, IPC and UTS namespaces, or the host's where the pod asks for them.
func namespaceOpts(s *Sandbox, hostname string) []oci.SpecOpts {
	var opts []oci.SpecOpts
	join := func(t specs.LinuxNamespaceType, path string) {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: t, Path: path}))
	}
	if s.UserNSPath != "" && s.IDMap != nil {
		opts = append(opts, withPodUserNS(s.UserNSPath, *s.IDMap))
	}
	if s.HostNetwork {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostNamespace(specs.UTSNamespace))
	} else {
		join(specs.NetworkNamespace, s.NetNSPath)
		if s.UTSNSPath != "" {
			// The hostname was set when the namespace was made.
			join(specs.UTSNamespace, s.UTSNSPath)
		} else {
			opts = append(opts, oci.WithHostname(hostname))
		}
	}
	switch {
	case s.HostIPC:
		opts = append(opts, oci.WithHostNamespace(specs.IPCNamespace))
	case s.IPCNSPath != "":
		join(specs.IPCNamespace, s.IPCNSPath)
	}
	switch {
	case s.HostPID:
		opts = append(opts, oci.WithHostNamespace(specs.PIDNamespace))
	case s.PausePID != 0:
		join(specs.PIDNamespace, fmt.Sprintf("/proc/%d/ns/pid", s.PausePID))
	}
	return opts
}

func bind(src, dst string, ro bool) specs.Mount {
	opts := []string{"rbind", "rprivate"}
	if ro {
		opts = append(opts, "ro")
	} else {
		opts = append(opts, "rw")
	}
	return specs.Mount{Source: src, Destination: dst, Type: "bind", Options: opts}
}

// hostCgroup2Opts are the options of the host's cgroup2 mount that a
// container sharing its superblock must repeat.
func hostCgroup2Opts() []string {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/sys/fs/cgroup"))
	if err != nil || len(mounts) == 0 {
		return nil
	}
	var out []string
	for _, opt := range strings.Split(mounts[0].VFSOptions, ",") {
		if opt == "nsdelegate" || opt == "memory_recursiveprot" {
			out = append(out, opt)
		}
	}
	return out
}

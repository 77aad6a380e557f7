package runtime

import (
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// specFor builds the OCI spec options of a container: containerd's defaults
// (the same as CRI's), the image config, then what the pod spec says.
func specFor(cfg ContainerConfig, args []string, termLog string) []oci.SpecOpts {
	s := cfg.Sandbox
	opts := []oci.SpecOpts{
		oci.WithImageConfig(cfg.Image.image),
		oci.WithProcessArgs(args...),
		oci.WithEnv(cfg.Env),
	}
	if cfg.WorkingDir != "" {
		opts = append(opts, oci.WithProcessCwd(cfg.WorkingDir))
	}
	if s.HostNetwork {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostNamespace(specs.UTSNamespace))
	} else {
		opts = append(opts,
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: s.NetNSPath}),
			oci.WithHostname(cfg.Hostname))
	}
	mounts := []specs.Mount{
		bind(s.HostsPath(), "/etc/hosts", false),
		bind(s.ResolvConfPath(), "/etc/resolv.conf", false),
		bind(s.HostnamePath(), "/etc/hostname", false),
	}
	if termLog != "" {
		mounts = append(mounts, bind(termLog, cfg.TerminationMessagePath, false))
	}
	for _, m := range cfg.Mounts {
		mounts = append(mounts, bind(m.HostPath, m.ContainerPath, m.ReadOnly))
	}
	opts = append(opts, oci.WithMounts(mounts))
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

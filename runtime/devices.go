package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	log "github.com/sirupsen/logrus"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// DefaultCDISpecDirs are where CDI specs live (the NVIDIA container
// toolkit writes /var/run/cdi/nvidia.yaml), as containerd's default.
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// Devices is what device plugins gave a container beyond mounts and env
// (which travel with the container's own): device nodes, annotations and
// CDI device names ("vendor.com/class=name").
type Devices struct {
	Nodes       []DeviceNode
	Annotations map[string]string
	CDI         []string
}

// DeviceNode is a host device made visible in the container.
type DeviceNode struct {
	HostPath, ContainerPath string
	// Permissions is the cgroup access, "rwm" when empty.
	Permissions string
}

// cdiCache reads the CDI spec dirs, once made; it is refreshed before each
// injection rather than watched, since containers with CDI devices are few.
type cdiCache struct {
	dirs []string
	once sync.Once
	c    *cdi.Cache
	err  error
}

func (cc *cdiCache) get() (*cdi.Cache, error) {
	cc.once.Do(func() {
		cc.c, cc.err = cdi.NewCache(cdi.WithSpecDirs(cc.dirs...), cdi.WithAutoRefresh(false))
	})
	return cc.c, cc.err
}

// deviceOpts applies a container's devices; it comes last, as CDI edits
// add to the env, mounts and hooks set before (containerd's CRI does the
// same).
func (r *Runtime) deviceOpts(d Devices) []oci.SpecOpts {
	var opts []oci.SpecOpts
	for _, n := range d.Nodes {
		perms := n.Permissions
		if perms == "" {
			perms = "rwm"
		}
		// A host path may be a symlink to the device (a block volume's
		// link in the pod's directory): containerd's CRI resolves it, as
		// oci.WithDevices, which reads the path's own mode, does not.
		host := n.HostPath
		if p, err := filepath.EvalSymlinks(host); err == nil {
			host = p
		}
		opts = append(opts, oci.WithDevices(host, n.ContainerPath, perms))
	}
	if len(d.Annotations) > 0 {
		opts = append(opts, oci.WithAnnotations(d.Annotations))
	}
	if len(d.CDI) > 0 {
		opts = append(opts, r.withCDIDevices(d.CDI))
	}
	return opts
}

func (r *Runtime) withCDIDevices(names []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		c, err := r.cdi.get()
		if err != nil {
			return fmt.Errorf("CDI registry: %w", err)
		}
		// A broken spec of another vendor must not stop this one; the
		// injection fails if the devices asked for are not resolved.
		if err := c.Refresh(); err != nil {
			log.WithError(err).Warn("CDI registry refresh failed")
		}
		if _, err := c.InjectDevices(s, names...); err != nil {
			return fmt.Errorf("CDI device injection failed: %w", err)
		}
		return nil
	}
}

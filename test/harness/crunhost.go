package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// crunHost readies a hybrid cgroup host (v1 controllers and a cgroup2
// mount at /sys/fs/cgroup/unified) for crun, which refuses one whose
// cgroup2 hierarchy has controllers: "cgroups in hybrid mode not
// supported, drop all controllers from cgroupv2". systemd's hybrid layout
// mounts every controller as v1 and leaves cgroup2 none; a host whose init
// left one out (this machine's hugetlb) has it on cgroup2. Each such
// controller is mounted as a v1 hierarchy of its own at
// /sys/fs/cgroup/<name>, which moves it off cgroup2, and stays mounted:
// unmounting does not reliably give it back to cgroup2 (a v1 hierarchy
// that still has a cgroup, or is still referenced, lives on unmounted),
// and a controller bound to a hierarchy with no mount is listed in every
// process's /proc/<pid>/cgroup with nowhere to find it, which containerd's
// shim cannot load a container's cgroup from ("cannot find cgroup mount
// destination"), with runc as with crun. Elsewhere (a cgroup v2 host, or a
// hybrid one whose cgroup2 has no controller) it does nothing.
func crunHost(logf func(string, ...any)) error {
	const root = "/sys/fs/cgroup"
	b, err := os.ReadFile(filepath.Join(root, "unified", "cgroup.controllers"))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	for _, ctl := range strings.Fields(string(b)) {
		dir := filepath.Join(root, ctl)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if err := unix.Mount("cgroup", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ctl); err != nil {
			return fmt.Errorf("mounting cgroup v1 controller %s for crun: %w", ctl, err)
		}
		logf("harness: mounted cgroup controller %s as v1 at %s, where it stays (crun refuses it on the cgroup2 of a hybrid host)", ctl, dir)
	}
	return nil
}

// BuildCrun builds crun (test/cluster/build.sh crun), readies the host for
// it (crunHost: a second call finds nothing to do) and returns its binary.
func BuildCrun(ctx context.Context, logf func(string, ...any)) (string, error) {
	bin, err := BuildComponent(ctx, logf, "crun")
	if err != nil {
		return "", err
	}
	return bin, crunHost(logf)
}

// WithCrun is c with crun (binary, its state under root, apart from
// runc's) as the default runtime: runc's shim with crun as BinaryName, as
// a user configures a host whose pods run on crun.
func (c CRIConfig) WithCrun(binary, root string) CRIConfig {
	c.DefaultRuntime = "crun"
	c.Runtimes = append(slices.Clone(c.Runtimes), CRIRuntime{Name: "crun", Type: "io.containerd.runc.v2", BinaryName: binary, Root: root})
	return c
}

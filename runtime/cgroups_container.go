package runtime

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/systemd"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// containerCgroupDir is the directory, relative to a hierarchy's mount
// point, of a container's cgroup given its spec's linux.cgroupsPath:
// the path itself for cgroupfs, <slice's path>/<prefix>-<name>.scope for
// runc's systemd form "slice:prefix:name" (an empty slice is runc's
// default, system.slice). "" when it names none.
func containerCgroupDir(cgroupsPath string) string {
	if cgroupsPath == "" {
		return ""
	}
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		return path.Clean("/" + cgroupsPath)
	}
	slice := parts[0]
	if slice == "" {
		slice = "system.slice"
	}
	dir, err := systemd.ExpandSlice(slice)
	if err != nil || parts[2] == "" {
		return ""
	}
	name := parts[2] + ".scope"
	if parts[1] != "" {
		name = parts[1] + "-" + name
	}
	return path.Join(dir, name)
}

// RemoveContainerCgroup removes, in every hierarchy, the cgroup of a
// container whose task is gone (cgroupsPath its spec's): runc deletes it
// with the task, but a task creation cut short (hostlet or containerd
// killed in the middle of the shim's `runc create`) can leave the cgroup
// runc had made, and the `runc init` waiting in it, with no task to
// delete, below a pod that lives on. What is still in it is killed first:
// with the container's task deleted nothing of the container may run.
func (c *Cgroups) RemoveContainerCgroup(cgroupsPath string) error {
	if c == nil {
		return nil
	}
	dir := containerCgroupDir(cgroupsPath)
	if dir == "" || dir == "/" {
		return nil
	}
	mounts, err := c.mounts()
	if err != nil {
		return err
	}
	var paths []string
	for _, m := range mounts {
		p := filepath.Join(m, dir)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		paths = append(paths, p)
		pids, _ := cgroups.GetAllPids(p)
		for _, pid := range pids {
			log.WithFields(log.Fields{"cgroup": p, "pid": pid}).Info("killing a process left in the cgroup of a container whose task is gone")
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	var errs []error
	for _, p := range paths {
		// RemovePath retries while killed processes leave.
		if err := cgroups.RemovePath(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

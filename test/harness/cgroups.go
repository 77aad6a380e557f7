package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// cgroupRoot is the --cgroup-root of a cluster's hostlets (one below it per
// node): their kubepods stay apart from other clusters' and from any
// kubelet's, and go with the cluster.
func (in *instance) cgroupRoot() string { return "/hostlet-e2e-" + in.ID }

// CgroupMounts lists the mount points of every cgroup hierarchy (v1
// controllers, named ones and the v2 mount of a hybrid host).
func CgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) >= 3 && (fs[2] == "cgroup" || fs[2] == "cgroup2") {
			out = append(out, fs[1])
		}
	}
	return out, s.Err()
}

// RemoveCgroupRoot removes root and everything a kubelet or hostlet made below it,
// deepest first (cgroup dirs go with rmdir, their files are virtual).
func RemoveCgroupRoot(root string) error {
	mounts, err := CgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// CgroupRoot is the cgroup every node's --cgroup-root is below (removed
// with the cluster): tests make the cgroups a node's configuration names
// there.
func (c *Cluster) CgroupRoot() string { return c.inst.cgroupRoot() }

package runtime

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// ParseDriverName is a cgroup given by the user (kubeReservedCgroup,
// systemReservedCgroup) as the kubelet's cgroup manager reads it in the
// driver's form: a path for cgroupfs ("/kube.slice" is one component),
// a slice for systemd ("kube.slice" and "/kube.slice" are {"kube"},
// "kube-reserved.slice" is {"kube", "reserved"}).
func (c *Cgroups) ParseDriverName(s string) CgroupName {
	if !c.systemd {
		return ParseCgroupfsName(s)
	}
	base := strings.TrimSuffix(path.Base(s), ".slice")
	var out CgroupName
	for _, p := range strings.Split(base, "-") {
		out = append(out, strings.ReplaceAll(p, "_", "-"))
	}
	return out
}

// v1Validated are the v1 controllers whose directory the kubelet's
// Validate requires (hugetlb only where it is mounted): the others runc
// does not know confuse its existence check.
var v1Validated = []string{"cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb"}

// v2Validated are the controllers the kubelet uses on v2, of which the
// root offers some: a cgroup must have all of those enabled.
var v2Validated = []string{"cpu", "cpuset", "memory", "hugetlb", "pids"}

// Validate checks that cgroup n exists as the kubelet's cgroup manager's
// Validate does, with its messages: on v1 a directory in each controller
// it uses, on v2 those controllers enabled in it.
func (c *Cgroups) Validate(n CgroupName) error {
	name := c.name(n)
	if c.v2 {
		dir := filepath.Join(unifiedMountpoint, name)
		have, err := readControllers(dir)
		if err != nil {
			return fmt.Errorf("could not read controllers for cgroup %q: %w", []string(n), err)
		}
		root, err := readControllers(unifiedMountpoint)
		if err != nil {
			return fmt.Errorf("could not read controllers for cgroup %q: %w", []string(n), err)
		}
		var missing []string
		for _, ctl := range v2Validated {
			if root[ctl] && !have[ctl] {
				missing = append(missing, ctl)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("cgroup %q has some missing controllers: %v", []string(n), strings.Join(missing, ", "))
		}
		return nil
	}
	mounts, err := c.subsystemMounts()
	if err != nil {
		return err
	}
	var missing []string
	for _, ctl := range v1Validated {
		m, ok := mounts[ctl]
		if !ok {
			continue
		}
		p := filepath.Join(m, name)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cgroup %q has some missing paths: %v", []string(n), strings.Join(missing, ", "))
	}
	return nil
}

func readControllers(dir string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, f := range strings.Fields(string(b)) {
		out[f] = true
	}
	return out, nil
}

// UpdateExisting writes res on cgroup n, which must exist (Validate): the
// kubelet's enforceExistingCgroup for the reserved cgroups, which it never
// creates (their owner, systemd or the operator, does).
func (c *Cgroups) UpdateExisting(n CgroupName, res PodResources) error {
	if err := c.Validate(n); err != nil {
		return err
	}
	return c.update(n, &res)
}

// MoveProcess puts pid into cgroup name (a cgroupfs path below the root,
// made if missing), as the kubelet's system containers are managed: with
// the cgroupfs manager whatever the driver, so on a systemd host the path
// is the unit's, e.g. "/system.slice/kubelet.service". It does nothing
// when pid is there already.
func (c *Cgroups) MoveProcess(name string, pid int) error {
	if cur, err := ProcessCgroup(pid, c.v2); err == nil && cur == path.Clean(name) {
		return nil
	}
	m, err := manager.New(&cgroups.Cgroup{Parent: "/", Name: name, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return err
	}
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("failed to move PID %d into %q: %w", pid, name, err)
	}
	return nil
}

// PodsCgroupName is the pods' cgroup (kubepods, or the root without
// --cgroups-per-qos) by name: the path from the hierarchies' root in the
// driver's form.
func (c *Cgroups) PodsCgroupName() string { return c.name(c.pods) }

// ProcessCgroup is the cgroup of pid as the kubelet's getContainer reads
// it: the unified one on v2, the cpu controller's on v1 (which must be
// the memory controller's too: the kubelet accounts by it).
func ProcessCgroup(pid int, v2 bool) (string, error) {
	cgs, err := cgroups.ParseCgroupFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	if v2 {
		c, ok := cgs[""]
		if !ok {
			return "", fmt.Errorf("PID %d has no unified cgroup", pid)
		}
		return c, nil
	}
	cpu, mem := cgs["cpu"], cgs["memory"]
	if cpu != mem {
		return "", fmt.Errorf("cpu and memory cgroup hierarchy not unified.  cpu: %s, memory: %s", cpu, mem)
	}
	return cpu, nil
}

// CgroupPids lists the processes of cgroup name (a cgroupfs path: "/" is
// the root) as the kubelet's GetPids: on v1 from the cpu controller's
// hierarchy (the one its system containers are found by), on v2 the
// unified one; those of its descendants are not included.
func (c *Cgroups) CgroupPids(name string) ([]int, error) {
	dir := filepath.Join(unifiedMountpoint, name)
	if !c.v2 {
		mounts, err := c.subsystemMounts()
		if err != nil {
			return nil, err
		}
		m, ok := mounts["cpu"]
		if !ok {
			return nil, fmt.Errorf("no cpu cgroup controller mounted")
		}
		dir = filepath.Join(m, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids, nil
}

// MaxPIDs is the node's task limit as the kubelet's pidlimit reads it:
// the lower of kernel.pid_max and kernel.threads-max; 0 when neither reads.
func MaxPIDs(procSys string) int64 {
	var out int64
	for _, f := range []string{"kernel/pid_max", "kernel/threads-max"} {
		b, err := os.ReadFile(filepath.Join(procSys, f))
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && (out == 0 || n < out) {
			out = n
		}
	}
	return out
}

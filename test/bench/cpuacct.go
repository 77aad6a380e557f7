package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/prometheus/procfs"
)

// cpuacctRoot is the cgroup v1 cpuacct hierarchy (the bench runs on a
// cgroup v1 host, as the kubelet's cgroupfs driver there).
const cpuacctRoot = "/sys/fs/cgroup/cpuacct"

// cpuGroupParent holds the groups; not cgroupRoot, which the kubelet owns.
const cpuGroupParent = "hostlet-bench-cpu"

// cpuGroup is a cpuacct cgroup a node's agent or runtime is moved into, so
// that the CPU of everything it forks afterwards counts too: containerd's
// shims and runc, the CNI plugins of whoever runs them. Container processes
// are not counted: runc moves them into the pods' cgroups.
type cpuGroup struct{ dir string }

// newCPUGroup creates cpuacct group name and moves pids into it.
func newCPUGroup(name string, pids ...int) (*cpuGroup, error) {
	g := &cpuGroup{dir: filepath.Join(cpuacctRoot, cpuGroupParent, name)}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return nil, err
	}
	for _, pid := range pids {
		if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return nil, fmt.Errorf("moving %d into %s: %w", pid, g.dir, err)
		}
	}
	return g, nil
}

// podsCPUGroup is the cpuacct group of a node's cgroup root (cgroupfs
// form), which its pods' cgroups are made below: cpuacct charges a task's
// every ancestor, so the root keeps the CPU of pods deleted since. Made
// here if the node has not yet, so that the first reading is not 0 of a
// group that then counts from before it.
func podsCPUGroup(root string) (*cpuGroup, error) {
	g := &cpuGroup{dir: filepath.Join(cpuacctRoot, root)}
	return g, os.MkdirAll(g.dir, 0o755)
}

// newControlPlaneGroup moves the cluster's control plane into a cpuacct
// group of its own: during a burst the API server and etcd take a good
// part of the machine, on either kind of node.
func newControlPlaneGroup(pid func(string) int) (*cpuGroup, error) {
	var pids []int
	for _, name := range harness.ControlPlane {
		if p := pid(name); p > 0 {
			pids = append(pids, p)
		}
	}
	return newCPUGroup("control-plane", pids...)
}

// countCPU moves the target's agent and runtime into cpuacct groups of
// their own, and counts the control plane's group and its pods' (below
// podsRoot, the node's cgroup root).
func (t *target) countCPU(podsRoot string, control *cpuGroup) (err error) {
	if t.agentCG, err = newCPUGroup(t.label+"-agent", t.agentPid); err != nil {
		return err
	}
	if t.runtimeCG, err = newCPUGroup(t.label+"-runtime", t.runtimePid); err != nil {
		return err
	}
	t.controlCG = control
	t.podsCG, err = podsCPUGroup(podsRoot)
	return err
}

// usage is the group's CPU time so far; zero for a nil group.
func (g *cpuGroup) usage() time.Duration {
	if g == nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(g.dir, "cpuacct.usage"))
	if err != nil {
		return 0
	}
	ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns)
}

// removeCPUGroups moves whatever still runs in the bench's groups (a shim
// that outlived its containerd) back to the root and removes them.
func removeCPUGroups() error {
	parent := filepath.Join(cpuacctRoot, cpuGroupParent)
	ents, err := os.ReadDir(parent)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(cpuacctRoot, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		if err := os.Remove(dir); err != nil {
			return err
		}
	}
	return os.Remove(parent)
}

// cpuUse is the CPU a node's agent and runtime groups used over a span,
// the control plane's and the node's pods' (their processes, and the
// runc init that starts each), and the whole machine's: what is left is
// the kernel's own threads and the bench, which the node shares the CPUs
// with during a burst.
type cpuUse struct {
	agent, runtime     time.Duration
	controlPlane, pods time.Duration
	machine            machineUse
}

// machineUse is the whole machine's part of a span, from /proc/stat: busy
// is the time all CPUs spent busy (all but idle, iowait and steal, the
// time the hypervisor gave no one here; guest time is within user
// already), total all of their time, busy or not, and forks the processes
// and threads started (a node that runs fewer programs per pod, shim
// calls, runc, CNI plugins, starts fewer).
type machineUse struct {
	busy, total time.Duration
	forks       uint64
}

// others is the machine's CPU over the span that no group used.
func (u cpuUse) others() time.Duration {
	return max(u.machine.busy-u.agent-u.runtime-u.controlPlane-u.pods, 0)
}

// busy is the share of the machine's CPUs busy over the span: below 1, a
// burst waited on something other than CPU.
func (u cpuUse) busy() float64 {
	if u.machine.total <= 0 {
		return 0
	}
	return u.machine.busy.Seconds() / u.machine.total.Seconds()
}

// cpuMark is a reading of both groups and the machine, to subtract from a
// later one.
type cpuMark cpuUse

func (t target) cpuMark() cpuMark {
	return cpuMark{t.agentCG.usage(), t.runtimeCG.usage(), t.controlCG.usage(), t.podsCG.usage(), readMachine()}
}

// since adds the CPU used since m to u.
func (u *cpuUse) since(t target, m cpuMark) { u.add(m, t.cpuMark()) }

// add adds the CPU used from one mark to a later one to u: spans added in
// turn (a scenario's rounds) make one span of their summed figures.
func (u *cpuUse) add(from, to cpuMark) {
	u.agent += to.agent - from.agent
	u.runtime += to.runtime - from.runtime
	u.controlPlane += to.controlPlane - from.controlPlane
	u.pods += to.pods - from.pods
	// A failed read of /proc/stat is all zero: the span then adds no
	// machine figures rather than wrong ones.
	if from.machine.total > 0 && to.machine.total > 0 {
		u.machine.busy += to.machine.busy - from.machine.busy
		u.machine.total += to.machine.total - from.machine.total
		u.machine.forks += to.machine.forks - from.machine.forks
	}
}

// readMachine reads the machine's figures since boot from /proc/stat.
func readMachine() machineUse {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return machineUse{}
	}
	st, err := fs.Stat()
	if err != nil {
		return machineUse{}
	}
	t := st.CPUTotal
	busy := t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return machineUse{busy: sec(busy), total: sec(busy + t.Idle + t.Iowait + t.Steal), forks: st.ProcessCreated}
}

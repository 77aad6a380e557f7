package main

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

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

// newCPUGroup creates cpuacct group name and moves pid into it.
func newCPUGroup(name string, pid int) (*cpuGroup, error) {
	g := &cpuGroup{dir: filepath.Join(cpuacctRoot, cpuGroupParent, name)}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return nil, fmt.Errorf("moving %d into %s: %w", pid, g.dir, err)
	}
	return g, nil
}

// countCPU moves the target's agent and runtime into cpuacct groups of
// their own.
func (t *target) countCPU() (err error) {
	if t.agentCG, err = newCPUGroup(t.label+"-agent", t.agentPid); err != nil {
		return err
	}
	t.runtimeCG, err = newCPUGroup(t.label+"-runtime", t.runtimePid)
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
// and the whole machine's (busy time of all CPUs, from /proc/stat): the
// rest is the control plane, the pods' own processes and the bench, which
// the node shares the CPUs with during a burst. wall is the span's length.
// forks is how many processes and threads the machine started over it
// (/proc/stat's processes): a node that runs fewer programs per pod (shim
// calls, runc, CNI plugins) starts fewer.
type cpuUse struct {
	agent, runtime, machine, wall time.Duration
	forks                         uint64
}

// others is the machine's CPU over the span that neither group used.
func (u cpuUse) others() time.Duration { return max(u.machine-u.agent-u.runtime, 0) }

// busy is the share of the machine's CPUs busy over the span: below 1, a
// burst waited on something other than CPU.
func (u cpuUse) busy() float64 {
	if u.wall <= 0 {
		return 0
	}
	return u.machine.Seconds() / (u.wall.Seconds() * float64(goruntime.NumCPU()))
}

// epoch is the monotonic origin of cpuMark's wall readings.
var epoch = time.Now()

// cpuMark is a reading of both groups and the machine, to subtract from a
// later one.
type cpuMark cpuUse

func (t target) cpuMark() cpuMark {
	busy, forks := machineStat()
	return cpuMark{t.agentCG.usage(), t.runtimeCG.usage(), busy, time.Since(epoch), forks}
}

// since adds the CPU used since m to u.
func (u *cpuUse) since(t target, m cpuMark) { u.add(m, t.cpuMark()) }

// add adds the CPU used from one mark to a later one to u: spans added in
// turn (a scenario's rounds) make one span of their summed CPU and wall.
func (u *cpuUse) add(from, to cpuMark) {
	u.agent += to.agent - from.agent
	u.runtime += to.runtime - from.runtime
	u.machine += to.machine - from.machine
	u.wall += to.wall - from.wall
	if to.forks >= from.forks { // a failed read is 0: no count, not a wrapped one
		u.forks += to.forks - from.forks
	}
}

// machineStat is the CPU time all CPUs spent busy since boot (/proc/stat's
// first line but idle, iowait and steal: time the hypervisor gave no one
// here; guest time is within user already) and the processes and threads
// started since boot.
func machineStat() (time.Duration, uint64) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0
	}
	t := st.CPUTotal
	return time.Duration((t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ) * float64(time.Second)), st.ProcessCreated
}

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	log "github.com/sirupsen/logrus"
)

// cpuTime is a process's user+system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	st, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

func procStat(pid int) (procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return p.Stat()
}

// procStatus is a process's /proc/<pid>/status (VmRSS, RssAnon, RssFile).
func procStatus(pid int) (procfs.ProcStatus, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return p.NewStatus()
}

// rssBytes is a process's resident set size (VmRSS).
func rssBytes(pid int) (int64, error) {
	st, err := procStatus(pid)
	return int64(st.VmRSS), err
}

// pssBytes is a process's proportional set size (shared pages split among
// their users), which unlike RSS adds up over many copies of one binary.
func pssBytes(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	r, err := p.ProcSMapsRollup()
	return int64(r.Pss), err
}

// findProcs returns the processes whose command line satisfies match.
func findProcs(match func(pid int, args []string) bool) []int {
	var pids []int
	procs, _ := procfs.AllProcs()
	for _, p := range procs {
		args, err := p.CmdLine()
		if err == nil && len(args) > 0 && match(p.PID, args) {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// findProc returns the first process whose command line satisfies match.
func findProc(match func(pid int, args []string) bool) (int, bool) {
	pids := findProcs(match)
	if len(pids) == 0 {
		return 0, false
	}
	return pids[0], true
}

// idleRSS is the memory of a node's agent and runtime with pods idle.
type idleRSS struct {
	agent, runtime int64 // VmRSS
	shims          int   // containerd shims of the node's containerd
	shimsPSS       int64 // their PSS, summed
}

// measureIdle samples the node's agent, its containerd and that
// containerd's shims.
func measureIdle(t target) (idleRSS, error) {
	var m idleRSS
	var err error
	if m.agent, err = rssBytes(t.agentPid); err != nil {
		return m, err
	}
	// RSS mixes the heap with the binary's pages read from disk.
	if st, err := procStatus(t.agentPid); err == nil {
		log.Infof("[%s] idle agent RSS %s: anonymous %s, file-backed %s", t.label, mib(m.agent), mib(int64(st.RssAnon)), mib(int64(st.RssFile)))
	}
	if m.runtime, err = rssBytes(t.runtimePid); err != nil {
		return m, err
	}
	shims := findProcs(func(_ int, args []string) bool {
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			return false
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == t.socket {
				return true
			}
		}
		return false
	})
	for _, pid := range shims {
		if pss, err := pssBytes(pid); err == nil {
			m.shims++
			m.shimsPSS += pss
		}
	}
	return m, nil
}

// findSleeper finds the exit pod's container process, `sleep <arg>` whose
// parent is a containerd shim (the container's PID 1). Running can be
// reported before runc's init has exec'd the command: it looks for a while.
func findSleeper(arg string) (int, error) {
	for i := 0; ; i++ {
		pid, ok := findProc(func(pid int, args []string) bool {
			return len(args) == 2 && args[0] == "sleep" && args[1] == arg && strings.Contains(parentCmd(pid), "containerd-shim")
		})
		if ok {
			return pid, nil
		}
		if i == 50 {
			return 0, fmt.Errorf("no container process `sleep %s`", arg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parentCmd(pid int) string {
	st, err := procStat(pid)
	if err != nil {
		return ""
	}
	p, err := procfs.NewProc(st.PPID)
	if err != nil {
		return ""
	}
	args, _ := p.CmdLine()
	return strings.Join(args, " ")
}

// usage is what a set of processes consumed over a measurement window.
type usage struct {
	cpu    time.Duration
	maxRSS int64
}

// sampler follows the CPU time and the largest RSS of one process.
type sampler struct {
	pid    int
	cpu0   time.Duration
	maxRSS int64
}

func newSampler(pid int) (*sampler, error) {
	c, err := cpuTime(pid)
	if err != nil {
		return nil, err
	}
	s := &sampler{pid: pid, cpu0: c}
	return s, s.sample()
}

func (s *sampler) sample() error {
	r, err := rssBytes(s.pid)
	if err != nil {
		return err
	}
	s.maxRSS = max(s.maxRSS, r)
	return nil
}

func (s *sampler) result() (usage, error) {
	if err := s.sample(); err != nil {
		return usage{}, err
	}
	c, err := cpuTime(s.pid)
	return usage{cpu: c - s.cpu0, maxRSS: s.maxRSS}, err
}

package main

import (
	"bytes"
	"fmt"
	log "github.com/sirupsen/logrus"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat; 100
// on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is a process's user+system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) start at state.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("pid %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("pid %d: short stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("pid %d: bad utime/stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// rssBytes is a process's resident set size (VmRSS).
func rssBytes(pid int) (int64, error) { return procKB(pid, "status", "VmRSS:") }

// pssBytes is a process's proportional set size (shared pages split among
// their users), which unlike RSS adds up over many copies of one binary.
func pssBytes(pid int) (int64, error) { return procKB(pid, "smaps_rollup", "Pss:") }

// procKB reads the "<field> N kB" line of /proc/<pid>/<file>, in bytes.
func procKB(pid int, file, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("pid %d: no %s in %s", pid, field, file)
}

// findProcs returns the processes whose command line satisfies match.
func findProcs(match func(pid int, args []string) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && match(pid, strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
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
	anon, _ := procKB(t.agentPid, "status", "RssAnon:")
	file, _ := procKB(t.agentPid, "status", "RssFile:")
	log.Infof("[%s] idle agent RSS %s: anonymous %s, file-backed %s", t.label, mib(m.agent), mib(anon), mib(file))
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return ""
	}
	cmd, _ := os.ReadFile("/proc/" + f[1] + "/cmdline")
	return string(cmd)
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

package runtime

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
)

// writeFiles writes a cgroup's files into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A cgroup v2 container's files as the kernel writes them, read as cAdvisor
// reads them: CPU in nanoseconds, v2's anon/file as RSS/cache, swap apart
// from memory, oom_kill from memory.events, cpu.weight mapped back onto
// shares, "max" limits, PSI totals, the oldest of the directory's and
// cgroup.events' times as the creation time.
func TestCgroupStatsV2(t *testing.T) {
	cgroups.TestMode = true
	defer func() { cgroups.TestMode = false }()
	dir := filepath.Join(t.TempDir(), "kubepods", "burstable", "podx", "c1")
	psi := func(some, full int) string {
		return "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + strconv.Itoa(some) +
			"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=" + strconv.Itoa(full) + "\n"
	}
	writeFiles(t, dir, map[string]string{
		"cgroup.controllers":  "cpu io memory pids\n",
		"cgroup.procs":        strconv.Itoa(os.Getpid()) + "\n",
		"cgroup.events":       "populated 1\nfrozen 0\n",
		"cpu.stat":            "usage_usec 5000000\nuser_usec 3000000\nsystem_usec 2000000\nnr_periods 100\nnr_throttled 20\nthrottled_usec 400000\n",
		"cpu.weight":          "4\n",
		"cpu.max":             "20000 100000\n",
		"memory.stat":         "anon 1048576\nkernel 65536\nfile 2097152\nfile_mapped 4096\nactive_file 1048576\ninactive_file 524288\npgfault 1000\npgmajfault 10\n",
		"memory.current":      "4194304\n",
		"memory.peak":         "8388608\n",
		"memory.max":          "67108864\n",
		"memory.min":          "0\n",
		"memory.swap.current": "1024\n",
		"memory.swap.max":     "max\n",
		"memory.events":       "low 0\nhigh 0\nmax 5\noom 2\noom_kill 1\n",
		"pids.current":        "7\n",
		"pids.max":            "100\n",
		"io.stat":             "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n",
		"cpu.pressure":        "some avg10=1.50 avg60=0.75 avg300=0.25 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=567\n",
		"memory.pressure":     psi(20, 10),
		"io.pressure":         psi(40, 30),
	})
	now := time.Now()
	boot := now.Add(-24 * time.Hour)
	_ = os.Chtimes(filepath.Join(dir, "cgroup.events"), now, now.Add(-3*time.Hour))
	_ = os.Chtimes(dir, now, now.Add(-2*time.Hour))

	st, err := readCgroupStats(map[string]string{"": dir}, true, false, now, boot)
	if err != nil {
		t.Fatal(err)
	}
	if want := (CgroupCPU{Total: 5e9, User: 3e9, System: 2e9, Periods: 100, ThrottledPeriods: 20, ThrottledTime: 4e8}); st.CPU != want {
		t.Errorf("cpu %+v, want %+v", st.CPU, want)
	}
	m := st.Memory
	if m.Usage != 4194304 || m.MaxUsage != 8388608 || m.WorkingSet != 4194304-524288 || m.Cache != 2097152 || m.RSS != 1048576 ||
		m.MappedFile != 4096 || m.Swap != 1024 || m.ActiveFile != 1048576 || m.InactiveFile != 524288 || m.PageFaults != 1000 || m.MajorPageFaults != 10 || m.TotalPageFaults != 1000 || m.TotalMajorPageFaults != 10 ||
		m.HasFailcnt || !m.HasKernelUsage || m.KernelUsage != 65536 {
		t.Errorf("memory %+v", m)
	}
	if st.OOMKills != 1 || st.Threads != 7 || st.ThreadsMax != 100 || st.Processes != 1 || st.FDs == 0 {
		t.Errorf("oom kills %d threads %d/%d processes %d fds %d", st.OOMKills, st.Threads, st.ThreadsMax, st.Processes, st.FDs)
	}
	if len(st.IO) != 1 || st.IO[0] != (CgroupIO{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 8192, Reads: 1, Writes: 2}) {
		t.Errorf("io %+v", st.IO)
	}
	line := func(some, full uint64) PSI { return PSI{Some: PSIData{Total: some}, Full: PSIData{Total: full}} }
	if p := st.Pressure; p == nil || *p != (CgroupPressure{CPUSome: 1234, CPUFull: 567, MemorySome: 20, MemoryFull: 10, IOSome: 40, IOFull: 30,
		CPU:    PSI{Some: PSIData{Avg10: 1.5, Avg60: 0.75, Avg300: 0.25, Total: 1234}, Full: PSIData{Total: 567}},
		Memory: line(20, 10), IO: line(40, 30)}) {
		t.Errorf("pressure %+v", p)
	}
	// cpu.weight 4 is the kubelet's weight for 100m (102 shares); cAdvisor's
	// map back gives 80.
	want := CgroupSpec{HasCPU: true, Shares: 80, Quota: 20000, Period: 100000, HasMemory: true,
		MemoryLimit: 64 << 20, SwapLimit: math.MaxUint64}
	if st.Spec != want {
		t.Errorf("spec %+v, want %+v", st.Spec, want)
	}
	if !st.Created.Equal(now.Add(-3 * time.Hour)) {
		t.Errorf("created %v, want %v", st.Created, now.Add(-3*time.Hour))
	}
	if !st.Time.Equal(now) {
		t.Errorf("time %v", st.Time)
	}

	// A cgroup gone (its container's task ended) is not there.
	if _, err := readCgroupStats(map[string]string{"": filepath.Join(dir, "gone")}, true, false, now, boot); !os.IsNotExist(err) {
		t.Errorf("missing cgroup: %v", err)
	}
	// No quota ("max") and no PSI (a kernel without it): no quota, no
	// pressure.
	writeFiles(t, dir, map[string]string{"cpu.max": "max 100000\n"})
	for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	st, err = readCgroupStats(map[string]string{"": dir}, true, false, now, boot)
	if err != nil {
		t.Fatal(err)
	}
	if st.Spec.Quota != 0 || st.Spec.Period != 100000 || st.Pressure != nil {
		t.Errorf("no quota, no PSI: spec %+v pressure %+v", st.Spec, st.Pressure)
	}
}

// The same figures from cgroup v1's controllers, each in its own
// hierarchy: cpuacct's user and system ticks, the hierarchical total_*
// memory figures, failcnt, oom_kill from memory.oom_control.
func TestCgroupStatsV1(t *testing.T) {
	cgroups.TestMode = true
	defer func() { cgroups.TestMode = false }()
	root := t.TempDir()
	name := "/kubepods/burstable/podx/c1"
	paths := map[string]string{}
	for _, s := range v1Subsystems {
		paths[s] = filepath.Join(root, s, name)
	}
	writeFiles(t, paths["cpu"], map[string]string{
		"cgroup.procs":          strconv.Itoa(os.Getpid()) + "\n",
		"cgroup.clone_children": "0\n",
		"cpu.stat":              "nr_periods 100\nnr_throttled 20\nthrottled_time 400000000\n",
		"cpu.shares":            "102\n",
		"cpu.cfs_period_us":     "100000\n",
		"cpu.cfs_quota_us":      "-1\n",
	})
	writeFiles(t, paths["cpuacct"], map[string]string{
		"cpuacct.usage":        "5000000000\n",
		"cpuacct.stat":         "user 300\nsystem 200\n",
		"cpuacct.usage_percpu": "2500000000 2500000000 \n",
		"cpuacct.usage_all":    "cpu user system\n0 1500000000 1000000000\n1 1500000000 1000000000\n",
	})
	writeFiles(t, paths["memory"], map[string]string{
		"memory.stat": "cache 10\nrss 20\ntotal_cache 2097152\ntotal_rss 1048576\ntotal_mapped_file 4096\ntotal_swap 0\n" +
			"total_active_file 1048576\ntotal_inactive_file 524288\npgfault 1000\npgmajfault 10\ntotal_pgfault 3000\ntotal_pgmajfault 30\n",
		"memory.usage_in_bytes":      "4194304\n",
		"memory.max_usage_in_bytes":  "8388608\n",
		"memory.failcnt":             "3\n",
		"memory.limit_in_bytes":      "67108864\n",
		"memory.soft_limit_in_bytes": "9223372036854771712\n",
		"memory.use_hierarchy":       "1\n",
		"memory.oom_control":         "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	})
	writeFiles(t, paths["blkio"], map[string]string{
		"blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 12288\nTotal 12288\n",
		"blkio.throttle.io_serviced_recursive":      "8:0 Read 1\n8:0 Write 2\n8:0 Sync 0\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 3\nTotal 3\n",
	})
	writeFiles(t, paths["pids"], map[string]string{"pids.current": "7\n", "pids.max": "max\n"})

	now := time.Now()
	st, err := readCgroupStats(paths, false, false, now, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := (CgroupCPU{Total: 5e9, User: 3e9, System: 2e9, Periods: 100, ThrottledPeriods: 20, ThrottledTime: 4e8}); st.CPU != want {
		t.Errorf("cpu %+v, want %+v", st.CPU, want)
	}
	m := st.Memory
	if m.Usage != 4194304 || m.MaxUsage != 8388608 || m.Failcnt != 3 || m.WorkingSet != 4194304-524288 || m.Cache != 2097152 ||
		m.RSS != 1048576 || m.MappedFile != 4096 || m.PageFaults != 1000 || !m.HasFailcnt ||
		m.TotalPageFaults != 3000 || m.TotalMajorPageFaults != 30 {
		t.Errorf("memory %+v", m)
	}
	if st.OOMKills != 2 || st.Threads != 7 || st.ThreadsMax != 0 || st.Processes != 1 || st.Pressure != nil {
		t.Errorf("oom kills %d threads %d/%d processes %d pressure %v", st.OOMKills, st.Threads, st.ThreadsMax, st.Processes, st.Pressure)
	}
	if len(st.IO) != 1 || st.IO[0] != (CgroupIO{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 8192, Reads: 1, Writes: 2}) {
		t.Errorf("io %+v", st.IO)
	}
	if want := (CgroupSpec{HasCPU: true, Shares: 102, Period: 100000, HasMemory: true, MemoryLimit: 64 << 20, Reservation: 9223372036854771712}); st.Spec != want {
		t.Errorf("spec %+v, want %+v", st.Spec, want)
	}
	if st.Created.IsZero() || st.Created.After(now) {
		t.Errorf("created %v", st.Created)
	}
	// The root's pids cgroup has no pids.current: read without it.
	_ = os.Remove(filepath.Join(paths["pids"], "pids.current"))
	if st, err := readCgroupStats(paths, false, true, now, now.Add(-time.Hour)); err != nil || st.CPU.Total != 5e9 || st.Threads != 0 {
		t.Errorf("without pids.current: %v, cpu %+v threads %d", err, st.CPU, st.Threads)
	}
}

// The names cAdvisor gives the cgroups (its id label): the container's
// cgroupfs path below the pod's, or systemd's cri-containerd scope in the
// pod's slice; kubepods and its QoS cgroups below the root.
func TestCgroupNames(t *testing.T) {
	if got := ContainerCgroupName("/kubepods/burstable/podx", "abc"); got != "/kubepods/burstable/podx/abc" {
		t.Errorf("cgroupfs: %s", got)
	}
	slice := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice"
	if got := ContainerCgroupName(slice, "abc"); got != slice+"/cri-containerd-abc.scope" {
		t.Errorf("systemd: %s", got)
	}
	if got := ContainerCgroupName("", "abc"); got != "" {
		t.Errorf("no parent: %q", got)
	}
	c := mustCgroups(t, "cgroupfs", "/e2e", true, false)
	if got := c.NodeCgroups(); len(got) != 4 || got[0] != "/" || got[1] != "/e2e/kubepods" || got[2] != "/e2e/kubepods/burstable" || got[3] != "/e2e/kubepods/besteffort" {
		t.Errorf("node cgroups %v", got)
	}
	if c.PodCgroupName("/e2e/kubepods/podx") != "/e2e/kubepods/podx" {
		t.Error("pod cgroup")
	}
	s := mustCgroups(t, "systemd", "", true, true)
	if got := s.NodeCgroups(); len(got) != 4 || got[1] != "/kubepods.slice" || got[2] != "/kubepods.slice/kubepods-burstable.slice" {
		t.Errorf("systemd node cgroups %v", got)
	}
	flat := mustCgroups(t, "cgroupfs", "", false, false)
	if got := flat.NodeCgroups(); len(got) != 1 || flat.PodCgroupName("/") != "" {
		t.Errorf("without --cgroups-per-qos: %v", got)
	}
}

package server

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakePods struct{ pods []*v1.Pod }

func (f fakePods) GetPod(context.Context, string, string) (*v1.Pod, error) {
	return nil, errors.New("no")
}
func (f fakePods) GetPodByUID(context.Context, types.UID) (*v1.Pod, error) {
	return nil, errors.New("no")
}
func (f fakePods) GetPods(context.Context) ([]*v1.Pod, error) { return f.pods, nil }

type fakeStats struct {
	net map[string][]runtime.InterfaceStats
}

func (f fakeStats) ContainerStats(context.Context) (map[string]runtime.ContainerStats, error) {
	return nil, nil
}
func (f fakeStats) PodNetworkStats(uid string) ([]runtime.InterfaceStats, error) {
	return f.net[uid], nil
}

type fakeUsage struct{ rootfs map[string]uint64 }

func (f fakeUsage) RootfsUsage(_ context.Context, id string) (runtime.DiskUsage, error) {
	if b, ok := f.rootfs[id]; ok {
		return runtime.DiskUsage{Bytes: b, Inodes: 3}, nil
	}
	return runtime.DiskUsage{}, fs.ErrNotExist
}
func (f fakeUsage) DirUsage(string) (runtime.DiskUsage, error) { return runtime.DiskUsage{}, nil }

// fakeCgroups has the cgroups of one node: kubepods below the root, a pod
// with a container whose cgroup is there and one whose is gone.
type fakeCgroups struct {
	stats   map[string]runtime.CgroupStats
	imageFs string
}

func (f fakeCgroups) NodeCgroups() []string { return []string{"/", "/kubepods"} }
func (f fakeCgroups) PodCgroupNames(uid string, ids []string) (string, map[string]string, error) {
	if uid != "uid1" {
		return "", nil, fs.ErrNotExist
	}
	out := map[string]string{}
	for _, id := range ids {
		out[id] = runtime.ContainerCgroupName("/kubepods/burstable/poduid1", id)
	}
	return "/kubepods/burstable/poduid1", out, nil
}
func (f fakeCgroups) CgroupStats(name string) (runtime.CgroupStats, error) {
	if st, ok := f.stats[name]; ok {
		return st, nil
	}
	return runtime.CgroupStats{}, fs.ErrNotExist
}
func (f fakeCgroups) ImageFsDir(context.Context) (string, error) { return f.imageFs, nil }

// The families the kubelet's cAdvisor serves with its default metric set
// (pkg/kubelet/server/server.go), with cAdvisor's types and own labels;
// hostlet serves each of them for the cgroups below, except those it
// leaves out for lack of a measurement (see the comments where they would
// be): the load average and task states, the CFQ/BFQ-only disk I/O
// families, container_ulimits_soft and cadvisor_version_info.
var wantFamilies = map[string]struct {
	kind  dto.MetricType
	extra string
}{
	"container_cpu_user_seconds_total":                 {dto.MetricType_COUNTER, ""},
	"container_cpu_system_seconds_total":               {dto.MetricType_COUNTER, ""},
	"container_cpu_usage_seconds_total":                {dto.MetricType_COUNTER, "cpu"},
	"container_cpu_cfs_periods_total":                  {dto.MetricType_COUNTER, ""},
	"container_cpu_cfs_throttled_periods_total":        {dto.MetricType_COUNTER, ""},
	"container_cpu_cfs_throttled_seconds_total":        {dto.MetricType_COUNTER, ""},
	"container_memory_cache":                           {dto.MetricType_GAUGE, ""},
	"container_memory_rss":                             {dto.MetricType_GAUGE, ""},
	"container_memory_kernel_usage":                    {dto.MetricType_GAUGE, ""},
	"container_memory_mapped_file":                     {dto.MetricType_GAUGE, ""},
	"container_memory_swap":                            {dto.MetricType_GAUGE, ""},
	"container_memory_failcnt":                         {dto.MetricType_COUNTER, ""},
	"container_memory_usage_bytes":                     {dto.MetricType_GAUGE, ""},
	"container_memory_max_usage_bytes":                 {dto.MetricType_GAUGE, ""},
	"container_memory_working_set_bytes":               {dto.MetricType_GAUGE, ""},
	"container_memory_total_active_file_bytes":         {dto.MetricType_GAUGE, ""},
	"container_memory_total_inactive_file_bytes":       {dto.MetricType_GAUGE, ""},
	"container_memory_failures_total":                  {dto.MetricType_COUNTER, "failure_type,scope"},
	"container_fs_inodes_free":                         {dto.MetricType_GAUGE, "device"},
	"container_fs_inodes_total":                        {dto.MetricType_GAUGE, "device"},
	"container_fs_limit_bytes":                         {dto.MetricType_GAUGE, "device"},
	"container_fs_usage_bytes":                         {dto.MetricType_GAUGE, "device"},
	"container_fs_reads_bytes_total":                   {dto.MetricType_COUNTER, "device"},
	"container_fs_reads_total":                         {dto.MetricType_COUNTER, "device"},
	"container_fs_writes_bytes_total":                  {dto.MetricType_COUNTER, "device"},
	"container_fs_writes_total":                        {dto.MetricType_COUNTER, "device"},
	"container_network_receive_bytes_total":            {dto.MetricType_COUNTER, "interface"},
	"container_network_receive_packets_total":          {dto.MetricType_COUNTER, "interface"},
	"container_network_receive_packets_dropped_total":  {dto.MetricType_COUNTER, "interface"},
	"container_network_receive_errors_total":           {dto.MetricType_COUNTER, "interface"},
	"container_network_transmit_bytes_total":           {dto.MetricType_COUNTER, "interface"},
	"container_network_transmit_packets_total":         {dto.MetricType_COUNTER, "interface"},
	"container_network_transmit_packets_dropped_total": {dto.MetricType_COUNTER, "interface"},
	"container_network_transmit_errors_total":          {dto.MetricType_COUNTER, "interface"},
	"container_processes":                              {dto.MetricType_GAUGE, ""},
	"container_file_descriptors":                       {dto.MetricType_GAUGE, ""},
	"container_sockets":                                {dto.MetricType_GAUGE, ""},
	"container_threads_max":                            {dto.MetricType_GAUGE, ""},
	"container_threads":                                {dto.MetricType_GAUGE, ""},
	"container_oom_events_total":                       {dto.MetricType_COUNTER, ""},
	"container_pressure_cpu_stalled_seconds_total":     {dto.MetricType_COUNTER, ""},
	"container_pressure_cpu_waiting_seconds_total":     {dto.MetricType_COUNTER, ""},
	"container_pressure_memory_stalled_seconds_total":  {dto.MetricType_COUNTER, ""},
	"container_pressure_memory_waiting_seconds_total":  {dto.MetricType_COUNTER, ""},
	"container_pressure_io_stalled_seconds_total":      {dto.MetricType_COUNTER, ""},
	"container_pressure_io_waiting_seconds_total":      {dto.MetricType_COUNTER, ""},
	"container_last_seen":                              {dto.MetricType_GAUGE, ""},
	"container_start_time_seconds":                     {dto.MetricType_GAUGE, ""},
	"container_spec_cpu_period":                        {dto.MetricType_GAUGE, ""},
	"container_spec_cpu_quota":                         {dto.MetricType_GAUGE, ""},
	"container_spec_cpu_shares":                        {dto.MetricType_GAUGE, ""},
	"container_spec_memory_limit_bytes":                {dto.MetricType_GAUGE, ""},
	"container_spec_memory_swap_limit_bytes":           {dto.MetricType_GAUGE, ""},
	"container_spec_memory_reservation_limit_bytes":    {dto.MetricType_GAUGE, ""},
	"container_scrape_error":                           {dto.MetricType_GAUGE, "-"},
	"machine_scrape_error":                             {dto.MetricType_GAUGE, "-"},
	"machine_cpu_cores":                                {dto.MetricType_GAUGE, "machine"},
	"machine_cpu_physical_cores":                       {dto.MetricType_GAUGE, "machine"},
	"machine_cpu_sockets":                              {dto.MetricType_GAUGE, "machine"},
	"machine_memory_bytes":                             {dto.MetricType_GAUGE, "machine"},
	"machine_swap_bytes":                               {dto.MetricType_GAUGE, "machine"},
}

// cadvisorFixture is a node whose container has a CPU quota, v2's PSI and
// a v1-style failcnt, and a machine under a fixture root.
func cadvisorFixture(t *testing.T, now time.Time) (*prometheus.Registry, *server) {
	t.Helper()
	read := now.Add(-time.Second)
	created := now.Add(-time.Hour)
	full := runtime.CgroupStats{
		Time: read, Created: created,
		CPU: runtime.CgroupCPU{Total: 3e9, User: 2e9, System: 1e9, Periods: 50, ThrottledPeriods: 5, ThrottledTime: 25e7},
		Memory: runtime.CgroupMemoryStats{Usage: 80 << 20, WorkingSet: 70 << 20, RSS: 64 << 20, Cache: 16 << 20,
			HasFailcnt: true, Failcnt: 2, HasKernelUsage: true, KernelUsage: 1 << 20, PageFaults: 9, MajorPageFaults: 1},
		OOMKills: 1, Threads: 4, ThreadsMax: 1024, Processes: 2, FDs: 7, Sockets: 1,
		IO:       []runtime.CgroupIO{{Major: 1, Minor: 3, ReadBytes: 100, WriteBytes: 200, Reads: 1, Writes: 2}},
		Pressure: &runtime.CgroupPressure{CPUSome: 1.5e6, CPUFull: 5e5},
		Spec: runtime.CgroupSpec{HasCPU: true, Shares: 102, Quota: 50000, Period: 100000, HasMemory: true,
			MemoryLimit: 128 << 20, SwapLimit: 1<<63 - 1},
	}
	plain := runtime.CgroupStats{Time: read, Created: created, CPU: runtime.CgroupCPU{Total: 9e9},
		Spec: runtime.CgroupSpec{HasCPU: true, Shares: 1024, Period: 100000}}
	cid := "c0ffee"
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid1"},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
			{Name: "app", Image: "docker.io/library/busybox:1.36", ContainerID: "containerd://" + cid},
			{Name: "gone", Image: "x", ContainerID: "containerd://dead"},
			{Name: "waiting"},
		}},
	}
	other := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unstarted", Namespace: "ns", UID: "uid2"}}
	s := &server{cfg: Config{
		Pods: fakePods{pods: []*v1.Pod{pod, other}},
		Stats: fakeStats{net: map[string][]runtime.InterfaceStats{"uid1": {
			{Name: "eth0", RxBytes: 1000, TxBytes: 2000, RxPackets: 10, TxPackets: 20, RxErrors: 1, TxDropped: 2},
			{Name: "veth123", RxBytes: 5},
		}}},
		Usage: fakeUsage{rootfs: map[string]uint64{cid: 4096}},
		Cgroups: fakeCgroups{imageFs: t.TempDir(), stats: map[string]runtime.CgroupStats{
			"/": plain, "/kubepods": plain,
			"/kubepods/burstable/poduid1":        plain,
			"/kubepods/burstable/poduid1/" + cid: full,
		}},
	}}
	clk := clocktesting.NewFakePassiveClock(now)
	reg := prometheus.NewPedanticRegistry()
	netDev := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(netDev, []byte("Inter-|   Receive                                                |  Transmit\n"+
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"+
		"    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n"+
		"  eth0: 5000 50 0 0 0 0 0 0 6000 60 0 0 0 0 0 0\n"+
		"veth12: 7 1 0 0 0 0 0 0 8 1 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(&cadvisorCollector{s: s, clock: clk, netDev: netDev}, &machineCollector{root: machineRoot(t), clock: clk})
	return reg, s
}

// machineRoot is a host of 2 sockets with 2 cores of 2 threads each, one
// CPU offline.
func machineRoot(t *testing.T) string {
	root := t.TempDir()
	files := map[string]string{
		"etc/machine-id":                 "m1\n",
		"sys/class/dmi/id/product_uuid":  "U1\n",
		"proc/sys/kernel/random/boot_id": "b1\n",
		"proc/meminfo":                   "MemTotal:        2048 kB\nMemFree:  1 kB\nSwapTotal:       1024 kB\n",
	}
	for i, topo := range []string{"0/0", "0/0", "0/1", "0/1", "1/0", "1/0", "1/1", "1/1", "1/1"} {
		cpu := "sys/devices/system/cpu/cpu" + string(rune('0'+i))
		pkg, core, _ := strings.Cut(topo, "/")
		files[cpu+"/topology/physical_package_id"] = pkg + "\n"
		files[cpu+"/topology/core_id"] = core + "\n"
		if i == 8 {
			files[cpu+"/online"] = "0\n"
		}
	}
	for p, v := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return -1
}

// find is the one series of a family whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	var found []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		l := labelsOf(m)
		ok := true
		for k, v := range want {
			if l[k] != v {
				ok = false
			}
		}
		if ok {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series", name, want, len(found))
	}
	return found[0]
}

// /metrics/cadvisor has cAdvisor's families with their types and labels;
// the root and kubepods have only id, the pod cgroup id, pod and
// namespace (and the pod's network, veth left out), a container all six;
// a container whose cgroup is gone and a pod without a sandbox have
// nothing.
func TestCadvisorSeries(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	reg, _ := cadvisorFixture(t, now)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	for name, w := range wantFamilies {
		f := fams[name]
		if f == nil {
			t.Errorf("family %s missing", name)
			continue
		}
		if f.GetType() != w.kind {
			t.Errorf("%s is %v, want %v", name, f.GetType(), w.kind)
		}
		want := map[string]bool{}
		switch w.extra {
		case "-":
		case "machine":
			want = map[string]bool{"machine_id": true, "system_uuid": true, "boot_id": true}
		default:
			for _, l := range cadvisorLabels {
				want[l] = true
			}
			for _, l := range strings.Split(w.extra, ",") {
				if l != "" {
					want[l] = true
				}
			}
		}
		for _, m := range f.Metric {
			l := labelsOf(m)
			if len(l) != len(want) {
				t.Errorf("%s labels %v, want %v", name, l, want)
				break
			}
			for k := range want {
				if _, ok := l[k]; !ok {
					t.Errorf("%s labels %v, want %v", name, l, want)
				}
			}
		}
	}
	for name := range fams {
		if _, ok := wantFamilies[name]; !ok {
			t.Errorf("unexpected family %s", name)
		}
	}

	// Which cgroups, labelled how.
	var ids []string
	for _, m := range fams["container_last_seen"].Metric {
		l := labelsOf(m)
		ids = append(ids, l["id"])
		switch l["id"] {
		case "/", "/kubepods":
			if l["pod"]+l["namespace"]+l["container"]+l["image"]+l["name"] != "" {
				t.Errorf("node cgroup labels %v", l)
			}
		case "/kubepods/burstable/poduid1":
			if l["pod"] != "web" || l["namespace"] != "ns" || l["container"]+l["image"]+l["name"] != "" {
				t.Errorf("pod cgroup labels %v", l)
			}
		case "/kubepods/burstable/poduid1/c0ffee":
			if l["pod"] != "web" || l["namespace"] != "ns" || l["container"] != "app" || l["image"] != "docker.io/library/busybox:1.36" || l["name"] != "c0ffee" {
				t.Errorf("container labels %v", l)
			}
		}
	}
	sort.Strings(ids)
	if strings.Join(ids, " ") != "/ /kubepods /kubepods/burstable/poduid1 /kubepods/burstable/poduid1/c0ffee" {
		t.Errorf("cgroups %v", ids)
	}

	ctr := map[string]string{"container": "app", "pod": "web", "namespace": "ns"}
	podLevel := map[string]string{"id": "/kubepods/burstable/poduid1"}
	read := now.Add(-time.Second).UnixMilli()
	for _, c := range []struct {
		name   string
		labels map[string]string
		value  float64
		stamp  int64 // ms; 0: none
	}{
		{"container_cpu_usage_seconds_total", map[string]string{"container": "app", "cpu": "total"}, 3, read},
		{"container_cpu_user_seconds_total", ctr, 2, read},
		{"container_cpu_cfs_throttled_periods_total", ctr, 5, read},
		{"container_cpu_cfs_throttled_seconds_total", ctr, 0.25, read},
		{"container_memory_working_set_bytes", ctr, 70 << 20, read},
		{"container_memory_failcnt", ctr, 2, read},
		{"container_memory_failures_total", map[string]string{"container": "app", "failure_type": "pgmajfault", "scope": "hierarchy"}, 1, read},
		{"container_oom_events_total", ctr, 1, read},
		{"container_pressure_cpu_waiting_seconds_total", ctr, 1.5, read},
		{"container_pressure_cpu_stalled_seconds_total", ctr, 0.5, read},
		{"container_threads", ctr, 4, read},
		{"container_processes", ctr, 2, read},
		{"container_fs_usage_bytes", ctr, 4096, read},
		{"container_fs_writes_bytes_total", ctr, 200, read},
		{"container_network_receive_bytes_total", map[string]string{"id": podLevel["id"], "interface": "eth0", "container": ""}, 1000, read},
		{"container_network_transmit_packets_dropped_total", map[string]string{"pod": "web", "interface": "eth0"}, 2, read},
		{"container_network_transmit_bytes_total", map[string]string{"id": "/", "interface": "eth0"}, 6000, read},
		{"container_cpu_usage_seconds_total", podLevel, 9, read},
		{"container_last_seen", ctr, float64(now.Unix()), now.UnixMilli()},
		{"container_start_time_seconds", ctr, float64(now.Add(-time.Hour).Unix()), 0},
		{"container_spec_cpu_quota", ctr, 50000, 0},
		{"container_spec_cpu_shares", ctr, 102, 0},
		{"container_spec_memory_limit_bytes", ctr, 128 << 20, 0},
		// Unlimited is 0.
		{"container_spec_memory_swap_limit_bytes", ctr, 0, 0},
		{"machine_cpu_cores", nil, 8, now.UnixMilli()},
		{"machine_cpu_physical_cores", map[string]string{"machine_id": "m1", "system_uuid": "U1", "boot_id": "b1"}, 4, now.UnixMilli()},
		{"machine_cpu_sockets", nil, 2, now.UnixMilli()},
		{"machine_memory_bytes", nil, 2 << 20, now.UnixMilli()},
		{"machine_swap_bytes", nil, 1 << 20, now.UnixMilli()},
		{"container_scrape_error", nil, 0, 0},
	} {
		m := find(t, fams, c.name, c.labels)
		if v := valueOf(m); v != c.value {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.value)
		}
		if m.GetTimestampMs() != c.stamp {
			t.Errorf("%s%v stamped %d, want %d", c.name, c.labels, m.GetTimestampMs(), c.stamp)
		}
	}
	// Only the pod cgroup has the pod's network and the root the host's,
	// veth and lo left out; no CFS series without a quota, no PSI or
	// failcnt where none was read.
	if n := len(fams["container_network_receive_bytes_total"].Metric); n != 2 {
		t.Errorf("%d network series", n)
	}
	for name, n := range map[string]int{
		"container_cpu_cfs_periods_total": 1, "container_spec_cpu_quota": 1, "container_pressure_io_waiting_seconds_total": 1,
		"container_memory_failcnt": 1, "container_memory_kernel_usage": 1, "container_spec_memory_limit_bytes": 1,
		"container_cpu_usage_seconds_total": 4, "container_spec_cpu_shares": 4,
	} {
		if got := len(fams[name].Metric); got != n {
			t.Errorf("%s: %d series, want %d", name, got, n)
		}
	}
	if got := len(fams["container_memory_rss"].Metric); got != 4 {
		t.Errorf("container_memory_rss: %d series", got)
	}
}

// A CPU counter still at 0 has no container_cpu_usage_seconds_total
// sample, as cAdvisor's; the node's interfaces are the root's.
func TestCadvisorEdges(t *testing.T) {
	s := &cgroupSeries{stats: runtime.CgroupStats{}}
	for _, m := range cpuMetrics {
		if m.name == "container_cpu_usage_seconds_total" && len(m.values(s)) != 0 {
			t.Error("usage sample at 0")
		}
	}
	for _, n := range []string{"lo", "veth0a", "docker0", "nerdctl1", "LO"} {
		if !ignoredInterface(n) {
			t.Errorf("%s not ignored", n)
		}
	}
	for _, n := range []string{"eth0", "net1", "ens3"} {
		if ignoredInterface(n) {
			t.Errorf("%s ignored", n)
		}
	}
	if specMemory(1<<62+1) != 0 || specMemory(9223372036854771712) != 0 || specMemory(64<<20) != 64<<20 {
		t.Error("specMemory")
	}
}

package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/utils/ptr"
)

const testUID = "6c1a4e95-6bb6-11e6-bc26-28d2444e470d"

func mustCgroups(t *testing.T, driver, root string, perQOS, v2 bool) *Cgroups {
	t.Helper()
	c, err := NewCgroups(CgroupConfig{Driver: driver, Root: root, PerQOS: perQOS}, v2)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The kubelet's own expectations (cgroup_manager_linux_test.go).
func TestCgroupNameUpstream(t *testing.T) {
	root := CgroupName{}
	for _, tc := range []struct {
		in                   CgroupName
		systemd, cgroupfs    string
		systemdBase, comment string
	}{
		{in: root, systemd: "/", cgroupfs: "/"},
		{in: root.Child("Burstable"), systemd: "/Burstable.slice", cgroupfs: "/Burstable"},
		{in: root.Child("Burstable").Child("pod-123"), systemd: "/Burstable.slice/Burstable-pod_123.slice"},
		{in: root.Child("BestEffort").Child("pod-" + testUID),
			systemd: "/BestEffort.slice/BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice"},
		{in: root.Child("kubepods"), systemd: "/kubepods.slice", cgroupfs: "/kubepods"},
		{in: root.Child("test").Child("a").Child("b"), systemd: "/test.slice/test-a.slice/test-a-b.slice"},
	} {
		if got := tc.in.ToSystemd(); got != tc.systemd {
			t.Errorf("%v.ToSystemd() = %q, want %q", tc.in, got, tc.systemd)
		}
		if tc.cgroupfs != "" {
			if got := tc.in.ToCgroupfs(); got != tc.cgroupfs {
				t.Errorf("%v.ToCgroupfs() = %q, want %q", tc.in, got, tc.cgroupfs)
			}
		}
	}
	if got := ParseCgroupfsName("/"); len(got) != 0 {
		t.Errorf("ParseCgroupfsName(/) = %v", got)
	}
}

// Every driver x version x QoS class: the pod's cgroup, a container's
// cgroupsPath (as containerd's CRI writes it from the kubelet's parent) and
// the library's description, against the kubelet's names.
func TestPodCgroupNames(t *testing.T) {
	const id = "0123abcd"
	uidSystemd := strings.ReplaceAll(testUID, "-", "_")
	for _, tc := range []struct {
		driver, root, qos   string
		parent, cgroupsPath string
		libPath             string // cgroupfs
		libParent, libName  string // systemd
	}{
		{driver: "cgroupfs", qos: QOSGuaranteed, parent: "/kubepods/pod" + testUID,
			cgroupsPath: "/kubepods/pod" + testUID + "/" + id, libPath: "/kubepods/pod" + testUID},
		{driver: "cgroupfs", qos: QOSBurstable, parent: "/kubepods/burstable/pod" + testUID,
			cgroupsPath: "/kubepods/burstable/pod" + testUID + "/" + id, libPath: "/kubepods/burstable/pod" + testUID},
		{driver: "cgroupfs", qos: QOSBestEffort, parent: "/kubepods/besteffort/pod" + testUID,
			cgroupsPath: "/kubepods/besteffort/pod" + testUID + "/" + id, libPath: "/kubepods/besteffort/pod" + testUID},
		{driver: "cgroupfs", root: "/hostlet-e2e/node", qos: QOSBurstable, parent: "/hostlet-e2e/node/kubepods/burstable/pod" + testUID,
			cgroupsPath: "/hostlet-e2e/node/kubepods/burstable/pod" + testUID + "/" + id, libPath: "/hostlet-e2e/node/kubepods/burstable/pod" + testUID},
		{driver: "systemd", qos: QOSGuaranteed, parent: "/kubepods.slice/kubepods-pod" + uidSystemd + ".slice",
			cgroupsPath: "kubepods-pod" + uidSystemd + ".slice:cri-containerd:" + id,
			libParent:   "kubepods.slice", libName: "kubepods-pod" + uidSystemd + ".slice"},
		{driver: "systemd", qos: QOSBurstable, parent: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSystemd + ".slice",
			cgroupsPath: "kubepods-burstable-pod" + uidSystemd + ".slice:cri-containerd:" + id,
			libParent:   "kubepods-burstable.slice", libName: "kubepods-burstable-pod" + uidSystemd + ".slice"},
		{driver: "systemd", qos: QOSBestEffort, parent: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidSystemd + ".slice",
			cgroupsPath: "kubepods-besteffort-pod" + uidSystemd + ".slice:cri-containerd:" + id,
			libParent:   "kubepods-besteffort.slice", libName: "kubepods-besteffort-pod" + uidSystemd + ".slice"},
		{driver: "systemd", root: "/custom", qos: QOSBurstable,
			parent:      "/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod" + uidSystemd + ".slice",
			cgroupsPath: "custom-kubepods-burstable-pod" + uidSystemd + ".slice:cri-containerd:" + id,
			libParent:   "custom-kubepods-burstable.slice", libName: "custom-kubepods-burstable-pod" + uidSystemd + ".slice"},
	} {
		for _, v2 := range []bool{false, true} {
			c := mustCgroups(t, tc.driver, tc.root, true, v2)
			parent, err := c.PodCgroupParent(testUID, tc.qos)
			if err != nil {
				t.Fatal(err)
			}
			if parent != tc.parent {
				t.Errorf("%s %s v2=%v: parent %q, want %q", tc.driver, tc.qos, v2, parent, tc.parent)
			}
			if got := containerCgroupsPath(parent, id, c.systemd); got != tc.cgroupsPath {
				t.Errorf("%s %s: cgroupsPath %q, want %q", tc.driver, tc.qos, got, tc.cgroupsPath)
			}
			// The spec option sees only the parent: it must pick the same form.
			s := &oci.Spec{}
			if err := withCgroupParent(parent)(context.Background(), nil, &containers.Container{ID: id}, s); err != nil {
				t.Fatal(err)
			}
			if s.Linux.CgroupsPath != tc.cgroupsPath {
				t.Errorf("%s %s: spec cgroupsPath %q, want %q", tc.driver, tc.qos, s.Linux.CgroupsPath, tc.cgroupsPath)
			}
			n, _ := c.podName(testUID, tc.qos)
			lib := c.libctConfig(n, nil)
			if lib.Path != tc.libPath || lib.Parent != tc.libParent || lib.Name != tc.libName || lib.Systemd != c.systemd {
				t.Errorf("%s %s: library config path=%q parent=%q name=%q", tc.driver, tc.qos, lib.Path, lib.Parent, lib.Name)
			}
		}
	}
}

func TestQOSAndRootCgroups(t *testing.T) {
	sd := mustCgroups(t, "systemd", "", true, true)
	if lib := sd.libctConfig(sd.pods, nil); lib.Parent != "-.slice" || lib.Name != "kubepods.slice" {
		t.Errorf("kubepods: parent %q name %q, want -.slice kubepods.slice", lib.Parent, lib.Name)
	}
	if got := sd.name(sd.qosName(QOSBurstable)); got != "/kubepods.slice/kubepods-burstable.slice" {
		t.Errorf("burstable: %q", got)
	}
	fs := mustCgroups(t, "cgroupfs", "/", true, false)
	if got := fs.name(fs.qosName(QOSBestEffort)); got != "/kubepods/besteffort" {
		t.Errorf("besteffort: %q", got)
	}
	// Without --cgroups-per-qos containers go straight below the root.
	flat := mustCgroups(t, "cgroupfs", "/", false, false)
	if p, _ := flat.PodCgroupParent(testUID, QOSBurstable); containerCgroupsPath(p, "x", false) != "/x" {
		t.Errorf("cgroupfs without QoS cgroups: parent %q", p)
	}
	flatSD := mustCgroups(t, "systemd", "", false, true)
	if p, _ := flatSD.PodCgroupParent(testUID, QOSBurstable); containerCgroupsPath(p, "x", true) != "-.slice:cri-containerd:x" {
		t.Errorf("systemd without QoS cgroups: parent %q", p)
	}
	if _, err := NewCgroups(CgroupConfig{Driver: "docker"}, false); err == nil {
		t.Error("unknown driver accepted")
	}
	if _, err := NewCgroups(CgroupConfig{Driver: "cgroupfs", Root: "/a_b"}, false); err == nil {
		t.Error("root with _ accepted")
	}
	if _, err := fs.PodCgroupParent("../x", QOSBurstable); err == nil {
		t.Error("uid with / accepted")
	}
}

func TestCPUConversions(t *testing.T) {
	// The kubelet's getCPUWeight (linear), for pod and QoS cgroups.
	for shares, want := range map[uint64]uint64{2: 1, 102: 4, 1024: 39, 2048: 79, 262144: 10000, 300000: 10000} {
		if got := CPUWeight(shares); got != want {
			t.Errorf("CPUWeight(%d) = %d, want %d", shares, got, want)
		}
	}
	for milli, want := range map[int64]uint64{0: 2, 1: 2, 100: 102, 1000: 1024, 500000: 262144} {
		if got := MilliCPUToShares(milli); got != want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", milli, got, want)
		}
	}
	for milli, want := range map[int64]int64{0: 0, 5: 1000, 200: 20000, 1500: 150000} {
		if got := MilliCPUToQuota(milli, QuotaPeriod); got != want {
			t.Errorf("MilliCPUToQuota(%d) = %d, want %d", milli, got, want)
		}
	}
}

// toResources is what the library writes: shares on v1, the kubelet's
// weight on v2; memory, quota and period alike; unified files on v2 only.
func TestPodResourcesPerVersion(t *testing.T) {
	res := &PodResources{CPUShares: ptr.To[uint64](102), CPUQuota: ptr.To[int64](20000), CPUPeriod: ptr.To[uint64](100000),
		Memory: ptr.To[int64](200 << 20), PidsLimit: ptr.To[int64](1024), Unified: map[string]string{"memory.min": "1"}}
	v1 := mustCgroups(t, "cgroupfs", "", true, false).toResources(res)
	if v1.CpuShares != 102 || v1.CpuWeight != 0 || v1.CpuQuota != 20000 || v1.CpuPeriod != 100000 || v1.Memory != 200<<20 || v1.PidsLimit != 1024 || v1.Unified != nil {
		t.Errorf("v1 resources: %+v", v1)
	}
	v2 := mustCgroups(t, "systemd", "", true, true).toResources(res)
	if v2.CpuShares != 0 || v2.CpuWeight != 4 || v2.CpuQuota != 20000 || v2.Memory != 200<<20 || v2.Unified["memory.min"] != "1" {
		t.Errorf("v2 resources: %+v", v2)
	}
	if !v2.SkipDevices {
		t.Error("pod cgroups must leave devices alone")
	}
}

// The files cgroup v2 gets, written by the library's fs2 driver into a
// stand-in directory: the pod cgroup's and a container's (runc converts
// the container's OCI shares with the same library's quadratic map).
func TestCgroupV2Files(t *testing.T) {
	cgroups.TestMode = true
	defer func() { cgroups.TestMode = false }()
	c := mustCgroups(t, "cgroupfs", "", true, true)
	burstable := &PodResources{CPUShares: ptr.To(MilliCPUToShares(100)), CPUQuota: ptr.To(MilliCPUToQuota(200, QuotaPeriod)),
		CPUPeriod: ptr.To[uint64](QuotaPeriod), Memory: ptr.To[int64](200 << 20)}
	dir := t.TempDir()
	for _, f := range []string{"cgroup.controllers", "cpu.weight", "cpu.max", "memory.max"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := c.podName(testUID, QOSBurstable)
	cfg := c.libctConfig(n, burstable)
	m, err := fs2.NewManager(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set(cfg.Resources); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cpu.weight": "4", "cpu.max": "20000 100000", "memory.max": "209715200"}
	for f, v := range want {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if strings.TrimSpace(string(b)) != v {
			t.Errorf("%s = %q, want %q", f, b, v)
		}
	}
	// A container's OCI resources (resourceOpts) and what runc makes of
	// them on v2.
	s := &oci.Spec{Linux: &specs.Linux{}, Process: &specs.Process{}}
	for _, o := range resourceOpts(Resources{CPUShares: 102, CPUQuota: 20000, CPUPeriod: 100000, MemoryLimit: 200 << 20}) {
		_ = o(context.Background(), nil, &containers.Container{}, s)
	}
	r := s.Linux.Resources
	if *r.CPU.Shares != 102 || *r.CPU.Quota != 20000 || *r.CPU.Period != 100000 || *r.Memory.Limit != 200<<20 {
		t.Errorf("container OCI resources: cpu %+v memory %+v", r.CPU, r.Memory)
	}
	// No CPU limit: the period alone, as containerd's CRI applies the
	// kubelet's 100000 with a quota of 0.
	s = &oci.Spec{Linux: &specs.Linux{}, Process: &specs.Process{}}
	for _, o := range resourceOpts(Resources{CPUShares: 2, CPUPeriod: 100000}) {
		_ = o(context.Background(), nil, &containers.Container{}, s)
	}
	if c := s.Linux.Resources.CPU; *c.Shares != 2 || c.Period == nil || *c.Period != 100000 || c.Quota != nil {
		t.Errorf("container OCI resources without a limit: cpu %+v", c)
	}
	// runc 1.3 (opencontainers/cgroups v0.0.4) maps shares quadratically,
	// while the kubelet maps its pod cgroups linearly (4 above): the same
	// pair the upstream kubelet and runc give on v2.
	if got := cgroups.ConvertCPUSharesToCgroupV2Value(*r.CPU.Shares); got != 17 {
		t.Errorf("runc's cpu.weight for 102 shares = %d, want 17", got)
	}
	if got := cgroups.ConvertCPUSharesToCgroupV2Value(1024); got != 100 {
		t.Errorf("runc's cpu.weight for 1024 shares = %d, want 100 (v2's default)", got)
	}
}

func TestDetectCgroupDriver(t *testing.T) {
	run := t.TempDir()
	if SystemdBooted(run) {
		t.Error("systemd seen in an empty dir")
	}
	if err := os.MkdirAll(filepath.Join(run, "systemd", "system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !SystemdBooted(run) {
		t.Error("systemd not seen")
	}
	other := t.TempDir()
	_ = os.MkdirAll(filepath.Join(other, "systemd"), 0o755)
	_ = os.WriteFile(filepath.Join(other, "systemd", "system"), nil, 0o644)
	if SystemdBooted(other) {
		t.Error("a file taken for systemd's directory")
	}
	for _, tc := range []struct {
		cri           string
		v2, systemd   bool
		want, comment string
	}{
		{cri: "systemd", want: "systemd", comment: "containerd's CRI answer wins"},
		{cri: "cgroupfs", v2: true, systemd: true, want: "cgroupfs", comment: "even against the host"},
		{v2: true, systemd: true, want: "systemd"},
		{v2: true, want: "cgroupfs", comment: "no systemd"},
		{systemd: true, want: "cgroupfs", comment: "cgroup v1"},
		{want: "cgroupfs"},
	} {
		if got := DetectCgroupDriver(tc.cri, tc.v2, tc.systemd); got != tc.want {
			t.Errorf("DetectCgroupDriver(%q, v2=%v, systemd=%v) = %q, want %q (%s)", tc.cri, tc.v2, tc.systemd, got, tc.want, tc.comment)
		}
	}
}

// The CRI's answer wins over the configured driver, as the kubelet 1.35's;
// without one the configured driver, else the host's.
func TestResolveCgroupDriver(t *testing.T) {
	for _, tc := range []struct{ configured, cri, want string }{
		{"systemd", "cgroupfs", "cgroupfs"},
		{"cgroupfs", "systemd", "systemd"},
		{"systemd", "", "systemd"},
		{"", "systemd", "systemd"},
		{"", "", "cgroupfs"},
	} {
		if got := ResolveCgroupDriver(tc.configured, tc.cri, false, false); got != tc.want {
			t.Errorf("configured %q, CRI %q: %q, want %q", tc.configured, tc.cri, got, tc.want)
		}
	}
	if got := ResolveCgroupDriver("", "", true, true); got != "systemd" {
		t.Errorf("nothing configured on a systemd cgroup v2 host: %q", got)
	}
}

func TestMemoryOf(t *testing.T) {
	v1 := memoryOf(cgroups.MemoryStats{Usage: cgroups.MemoryData{Usage: 1000, Limit: 1 << 63},
		Stats: map[string]uint64{"total_inactive_file": 300, "inactive_file": 1}}, false)
	if v1.WorkingSet != 700 || v1.Limit != 0 || v1.HasPressure {
		t.Errorf("v1: %+v", v1)
	}
	v2 := memoryOf(cgroups.MemoryStats{Usage: cgroups.MemoryData{Usage: 1000, Limit: 4096},
		Stats: map[string]uint64{"inactive_file": 1200}, PSI: &cgroups.PSIStats{Some: cgroups.PSIData{Avg10: 1.5}}}, true)
	if v2.WorkingSet != 0 || v2.Limit != 4096 || !v2.HasPressure || v2.PressureSomeAvg10 != 1.5 {
		t.Errorf("v2: %+v", v2)
	}
}

func TestSwapOnAndCapacity(t *testing.T) {
	dir := t.TempDir()
	off := filepath.Join(dir, "swaps-off")
	on := filepath.Join(dir, "swaps-on")
	_ = os.WriteFile(off, []byte("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"), 0o644)
	_ = os.WriteFile(on, []byte("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/swapfile file 4194300 0 -2\n"), 0o644)
	if v, err := SwapOn(off); err != nil || v {
		t.Errorf("SwapOn(header only) = %v, %v", v, err)
	}
	if v, err := SwapOn(on); err != nil || !v {
		t.Errorf("SwapOn(a swap file) = %v, %v", v, err)
	}
	meminfo := filepath.Join(dir, "meminfo")
	_ = os.WriteFile(meminfo, []byte("MemTotal:       24000000 kB\nSwapTotal:       4194300 kB\nSwapFree: 1 kB\n"), 0o644)
	if got := SwapCapacity(meminfo); got != 4194300*1024 {
		t.Errorf("SwapCapacity = %d", got)
	}
	root := t.TempDir()
	if SwapControllerAvailable(root, false) {
		t.Error("v1 swap accounting seen in an empty dir")
	}
	_ = os.MkdirAll(filepath.Join(root, "memory"), 0o755)
	_ = os.WriteFile(filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"), nil, 0o644)
	if !SwapControllerAvailable(root, false) {
		t.Error("v1 swap accounting not seen")
	}
}

// Swap settings reach the container's OCI resources.
func TestSwapResources(t *testing.T) {
	s := &oci.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	for _, o := range resourceOpts(Resources{CPUShares: 2, MemoryLimit: 1 << 20, MemorySwap: 1 << 20, Unified: map[string]string{"memory.swap.max": "0"}}) {
		if err := o(context.Background(), nil, &containers.Container{}, s); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Linux.Resources
	if *r.Memory.Swap != 1<<20 || r.Unified["memory.swap.max"] != "0" {
		t.Errorf("swap %v unified %v", r.Memory.Swap, r.Unified)
	}
}

// The pods' cgroups are read back from the QoS cgroups of every hierarchy
// for both drivers' names (the kubelet's GetAllPodsFromCgroups); the QoS
// cgroups themselves, containers' cgroups and files are no pods.
func TestPodCgroupUIDs(t *testing.T) {
	const g, b, be = "0b6e1f0c-aaaa-4bbb-8ccc-000000000001", "0b6e1f0c-aaaa-4bbb-8ccc-000000000002", "0b6e1f0c-aaaa-4bbb-8ccc-000000000003"
	for _, tc := range []struct {
		driver string
		// literal is b's cgroup as the kubelet names it, to check that
		// what is read is what the kubelet writes.
		literal string
	}{
		{"cgroupfs", "/hostlet/n1/kubepods/burstable/pod" + b},
		{"systemd", "/hostlet.slice/hostlet-n1.slice/hostlet-n1-kubepods.slice/hostlet-n1-kubepods-burstable.slice/hostlet-n1-kubepods-burstable-pod" +
			strings.ReplaceAll(b, "-", "_") + ".slice"},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			c := mustCgroups(t, tc.driver, "/hostlet/n1", true, false)
			cpu, memory := t.TempDir(), t.TempDir()
			c.mounts = func() ([]string, error) { return []string{cpu, memory}, nil }
			mkdir := func(mount, p string) {
				t.Helper()
				if err := os.MkdirAll(filepath.Join(mount, p), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := c.PodCgroupUIDs(); err != nil || len(got) != 0 {
				t.Fatalf("no kubepods: %v, %v", got, err)
			}
			gn, _ := c.podName(g, QOSGuaranteed)
			ben, _ := c.podName(be, QOSBestEffort)
			mkdir(cpu, c.name(gn))
			mkdir(cpu, filepath.Join(c.name(gn), "ctr1"))
			mkdir(cpu, tc.literal)
			// Only in the memory hierarchy: still a pod cgroup.
			mkdir(memory, c.name(ben))
			mkdir(memory, c.name(c.qosName(QOSBurstable)))
			mkdir(cpu, filepath.Join(c.name(c.pods), "system"))
			if err := os.WriteFile(filepath.Join(cpu, c.name(c.pods), "cpu.shares"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := c.PodCgroupUIDs()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if want := []string{g, b, be}; !slices.Equal(got, want) {
				t.Errorf("PodCgroupUIDs = %q, want %q", got, want)
			}
		})
	}
	flat := mustCgroups(t, "cgroupfs", "/", false, false)
	flat.mounts = func() ([]string, error) { t.Fatal("flat: hierarchies read"); return nil, nil }
	if got, err := flat.PodCgroupUIDs(); err != nil || got != nil {
		t.Errorf("without --cgroups-per-qos: %v, %v", got, err)
	}
}

// hostlet leave removes kubepods and its QoS cgroups once no pod has a
// cgroup: under systemd its slices are stopped (QoS ones first), then what
// is left of the tree in every hierarchy is removed; cgroups beside it stay.
// With a pod cgroup left nothing is touched.
func TestRemoveKubepods(t *testing.T) {
	for _, tc := range []struct {
		driver, root string
		units        []string
	}{
		{"cgroupfs", "/", nil},
		{"systemd", "/", []string{"kubepods-besteffort.slice", "kubepods-burstable.slice", "kubepods.slice"}},
		{"systemd", "/hostlet/n1", []string{"hostlet-n1-kubepods-besteffort.slice", "hostlet-n1-kubepods-burstable.slice", "hostlet-n1-kubepods.slice"}},
	} {
		t.Run(tc.driver+tc.root, func(t *testing.T) {
			c := mustCgroups(t, tc.driver, tc.root, true, false)
			cpu, memory := t.TempDir(), t.TempDir()
			c.mounts = func() ([]string, error) { return []string{cpu, memory}, nil }
			var stopped []string
			c.stopUnit = func(_ context.Context, name string) error { stopped = append(stopped, name); return nil }
			mkdir := func(mount string, n CgroupName) {
				t.Helper()
				if err := os.MkdirAll(filepath.Join(mount, c.name(n)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range []string{cpu, memory} {
				mkdir(m, c.qosName(QOSBurstable))
				mkdir(m, c.qosName(QOSBestEffort))
			}
			beside := c.pods[:len(c.pods)-1].Child("system")
			mkdir(cpu, beside)
			pod, _ := c.podName(testUID, QOSBestEffort)
			mkdir(memory, pod)
			if err := c.RemoveKubepods(context.Background()); err == nil || !strings.Contains(err.Error(), testUID) {
				t.Fatalf("with a pod cgroup left: %v", err)
			}
			if len(stopped) != 0 {
				t.Fatalf("units stopped with a pod left: %v", stopped)
			}
			if err := os.Remove(filepath.Join(memory, c.name(pod))); err != nil {
				t.Fatal(err)
			}
			if err := c.RemoveKubepods(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(stopped, tc.units) {
				t.Errorf("stopped %v, want %v", stopped, tc.units)
			}
			for _, m := range []string{cpu, memory} {
				if _, err := os.Stat(filepath.Join(m, c.name(c.pods))); !os.IsNotExist(err) {
					t.Errorf("kubepods left in %s: %v", m, err)
				}
			}
			if _, err := os.Stat(filepath.Join(cpu, c.name(beside))); err != nil {
				t.Errorf("a cgroup beside kubepods removed: %v", err)
			}
			// Again, with nothing there: nothing to do.
			if err := c.RemoveKubepods(context.Background()); err != nil {
				t.Errorf("again: %v", err)
			}
		})
	}
	flat := mustCgroups(t, "cgroupfs", "/", false, false)
	flat.mounts = func() ([]string, error) { t.Fatal("flat: hierarchies read"); return nil, nil }
	if err := flat.RemoveKubepods(context.Background()); err != nil {
		t.Errorf("without --cgroups-per-qos: %v", err)
	}
}

package nodecontainers

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
)

type fakeCgroups struct {
	setup   []int64
	updated map[string]runtime.PodResources
	exist   map[string]bool
	procs   map[string][]int
	moves   []string
}

func (f *fakeCgroups) Setup(cpu, mem, pids int64) error {
	f.setup = []int64{cpu, mem, pids}
	return nil
}
func (f *fakeCgroups) ParseDriverName(s string) runtime.CgroupName {
	return runtime.ParseCgroupfsName(s)
}
func (f *fakeCgroups) UpdateExisting(n runtime.CgroupName, res runtime.PodResources) error {
	if !f.exist[n.ToCgroupfs()] {
		return fmt.Errorf("cgroup %q has some missing paths: /sys/fs/cgroup/cpu%s", []string(n), n.ToCgroupfs())
	}
	if f.updated == nil {
		f.updated = map[string]runtime.PodResources{}
	}
	f.updated[n.ToCgroupfs()] = res
	return nil
}
func (f *fakeCgroups) MoveProcess(name string, pid int) error {
	f.moves = append(f.moves, fmt.Sprintf("%d>%s", pid, name))
	// Moved: no longer in the root.
	for from, pids := range f.procs {
		for i, p := range pids {
			if p == pid {
				f.procs[from] = append(pids[:i:i], pids[i+1:]...)
				break
			}
		}
	}
	return nil
}
func (f *fakeCgroups) PodsCgroupName() string { return "/kubepods" }
func (f *fakeCgroups) CgroupPids(name string) ([]int, error) {
	return append([]int(nil), f.procs[name]...), nil
}

var capacity = v1.ResourceList{
	v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), ResourcePID: resource.MustParse("4194304"),
}
var (
	sys  = v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("512Mi"), ResourcePID: resource.MustParse("1000")}
	kube = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("256Mi"), ResourcePID: resource.MustParse("1000")}
)

// kubepods gets the capacity less both reservations only with "pods";
// without it, the whole capacity, as the kubelet's.
func TestEnforceKubepods(t *testing.T) {
	for _, tc := range []struct {
		enforce []string
		want    []int64
	}{
		{[]string{EnforcePods}, []int64{3400, 8<<30 - 768<<20, 4194304 - 2000}},
		{nil, []int64{4000, 8 << 30, 4194304}},
		{[]string{EnforceSystemReserved}, []int64{4000, 8 << 30, 4194304}},
	} {
		cg := &fakeCgroups{exist: map[string]bool{"/system.slice": true}}
		m, err := New(Config{Enforce: tc.enforce, PerQOS: true, SystemReserved: sys, KubeReserved: kube, SystemReservedCgroup: "/system.slice"}, cg)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Enforce(capacity); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cg.setup, tc.want) {
			t.Errorf("enforce %v: kubepods %v, want %v", tc.enforce, cg.setup, tc.want)
		}
	}
}

// The reserved cgroups get their reservation (compressible: CPU only); one
// that does not exist stops the node with the kubelet's message and a
// warning event.
func TestEnforceReservedCgroups(t *testing.T) {
	cg := &fakeCgroups{exist: map[string]bool{"/system.slice": true, "/kube.slice": true}}
	rec := record.NewFakeRecorder(10)
	m, _ := New(Config{Enforce: []string{EnforcePods, EnforceSystemReserved, EnforceKubeReservedCompressible}, PerQOS: true,
		SystemReserved: sys, KubeReserved: kube, SystemReservedCgroup: "/system.slice", KubeReservedCgroup: "/kube.slice", Events: rec}, cg)
	if err := m.Enforce(capacity); err != nil {
		t.Fatal(err)
	}
	s := cg.updated["/system.slice"]
	if s.CPUShares == nil || *s.CPUShares != 512 || s.Memory == nil || *s.Memory != 512<<20 || s.PidsLimit == nil || *s.PidsLimit != 1000 {
		t.Errorf("system reserved %+v", s)
	}
	k := cg.updated["/kube.slice"]
	if k.CPUShares == nil || *k.CPUShares != 102 || k.Memory != nil || k.PidsLimit != nil {
		t.Errorf("kube reserved compressible %+v", k)
	}
	if got := <-rec.Events; got != "Normal SuccessfulNodeAllocatableEnforcement Updated Node Allocatable limit across pods" {
		t.Errorf("event %q", got)
	}
	if got := <-rec.Events; got != "Normal SuccessfulNodeAllocatableEnforcement Updated limits on system reserved cgroup /system.slice" {
		t.Errorf("event %q", got)
	}

	cg = &fakeCgroups{}
	rec = record.NewFakeRecorder(10)
	m, _ = New(Config{Enforce: []string{EnforcePods, EnforceKubeReserved}, PerQOS: true, KubeReserved: kube, KubeReservedCgroup: "/kube.slice", Events: rec}, cg)
	err := m.Enforce(capacity)
	want := `Failed to enforce Kube Reserved Cgroup Limits on "/kube.slice": cgroup ["kube.slice"] has some missing paths`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("a missing cgroup: %v, want %q", err, want)
	}
	<-rec.Events
	if got := <-rec.Events; !strings.HasPrefix(got, "Warning FailedNodeAllocatableEnforcement "+want) {
		t.Errorf("event %q", got)
	}
}

func TestSystemCgroupsRootRefused(t *testing.T) {
	if _, err := New(Config{SystemCgroups: "/"}, &fakeCgroups{}); err == nil || err.Error() != `system container cannot be root ("/")` {
		t.Errorf("systemCgroups /: %v", err)
	}
}

// The root's processes go into systemCgroups but PID 1 and kernel
// threads; hostlet goes into kubeletCgroups only when it is in the host's
// PID namespace.
func TestEnsureSystemContainers(t *testing.T) {
	cg := &fakeCgroups{procs: map[string][]int{"/": {1, 2, 40, 41, 99}}}
	m, _ := New(Config{SystemCgroups: "/system.slice", KubeletCgroups: "/system.slice/kubelet.service"}, cg)
	m.pid = 99
	m.kernel = func(pid int) bool { return pid == 2 }
	m.inHost = func(int) (bool, error) { return true, nil }
	if errs := m.EnsureSystemContainers(); len(errs) > 0 {
		t.Fatal(errs)
	}
	want := []string{"40>/system.slice", "41>/system.slice", "99>/system.slice", "99>/system.slice/kubelet.service"}
	if !reflect.DeepEqual(cg.moves, want) {
		t.Errorf("moves %v, want %v", cg.moves, want)
	}

	cg = &fakeCgroups{}
	m, _ = New(Config{KubeletCgroups: "/kubelet"}, cg)
	m.inHost = func(int) (bool, error) { return false, nil }
	if errs := m.EnsureSystemContainers(); len(errs) > 0 || len(cg.moves) > 0 {
		t.Errorf("in a container: moves %v, errors %v", cg.moves, errs)
	}
	m.inHost = func(int) (bool, error) { return false, errors.New("no ns") }
	if errs := m.EnsureSystemContainers(); len(errs) != 1 {
		t.Errorf("errors %v", errs)
	}
}

// The summary's system containers: kubeletCgroups or hostlet's own
// cgroup, systemCgroups as misc, --runtime-cgroups as runtime, the pods'
// cgroup.
func TestSystemContainers(t *testing.T) {
	m, _ := New(Config{KubeletCgroups: "/k", SystemCgroups: "/s", RuntimeCgroups: "/system.slice/containerd.service"}, &fakeCgroups{})
	if got := m.SystemContainers(); !reflect.DeepEqual(got, map[string]string{"kubelet": "/k", "misc": "/s", "pods": "/kubepods", "runtime": "/system.slice/containerd.service"}) {
		t.Errorf("%v", got)
	}
	m, _ = New(Config{}, &fakeCgroups{})
	m.cgroupOf = func(int) (string, error) { return "/user.slice", nil }
	if got := m.SystemContainers(); !reflect.DeepEqual(got, map[string]string{"kubelet": "/user.slice", "pods": "/kubepods"}) {
		t.Errorf("%v", got)
	}
	m.cgroupOf = func(int) (string, error) { return "", errors.New("not unified") }
	if got := m.SystemContainers(); !reflect.DeepEqual(got, map[string]string{"pods": "/kubepods"}) {
		t.Errorf("%v", got)
	}
}

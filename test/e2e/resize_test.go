package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cpuMem(cpuReq, cpuLim, memReq, memLim string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// resizePatch is the strategic merge patch kubectl sends for new resources
// of one container.
func resizePatch(container string, r v1.ResourceRequirements) string {
	q := func(l v1.ResourceList, n v1.ResourceName) string { v := l[n]; return v.String() }
	return fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"resources":{"requests":{"cpu":%q,"memory":%q},"limits":{"cpu":%q,"memory":%q}}}]}}`,
		container, q(r.Requests, v1.ResourceCPU), q(r.Requests, v1.ResourceMemory), q(r.Limits, v1.ResourceCPU), q(r.Limits, v1.ResourceMemory))
}

func kubectlResize(t *testing.T, ns, pod, container string, r v1.ResourceRequirements) {
	t.Helper()
	if out, err := cluster.Kubectl(ctxT(t), "-n", ns, "patch", "pod", pod, "--subresource", "resize", "-p", resizePatch(container, r)); err != nil {
		t.Fatalf("kubectl patch --subresource resize: %v: %s", err, out)
	}
}

func containerStatusOf(p *v1.Pod, name string) *v1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if st := &p.Status.ContainerStatuses[i]; st.Name == name {
			return st
		}
	}
	return nil
}

func podCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// resizedTo: the container reports r as allocated and configured, and no
// resize is pending or in progress.
func resizedTo(name string, r v1.ResourceRequirements) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool {
		st := containerStatusOf(p, name)
		return st != nil && st.Resources != nil && st.State.Running != nil &&
			sameQuantities(st.AllocatedResources, r.Requests) &&
			sameQuantities(st.Resources.Requests, r.Requests) && sameQuantities(st.Resources.Limits, r.Limits) &&
			podCondition(p, v1.PodResizePending) == nil && podCondition(p, v1.PodResizeInProgress) == nil
	}
}

func sameQuantities(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for n, q := range a {
		if o, ok := b[n]; !ok || o.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// containerCgroup reads a cgroup v1 file of a running container, found
// through /proc/<pid>/cgroup of its process.
func containerCgroup(t *testing.T, st *v1.ContainerStatus, controller, file string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", taskOf(t, st).Pid()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			if ctl == controller {
				b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[1], parts[2], file))
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Skipf("no cgroup v1 %s controller for the container", controller)
	return ""
}

func wantCgroups(t *testing.T, st *v1.ContainerStatus, shares, quota, mem string) {
	t.Helper()
	got := []string{
		containerCgroup(t, st, "cpu", "cpu.shares"),
		containerCgroup(t, st, "cpu", "cpu.cfs_quota_us"),
		containerCgroup(t, st, "memory", "memory.limit_in_bytes"),
	}
	if want := []string{shares, quota, mem}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("container %s cgroup cpu.shares, cfs_quota_us, memory.limit_in_bytes = %q, want %q", st.Name, got, want)
	}
}

// wantPodCgroup checks a Burstable pod's cgroup (kubepods/burstable/pod<uid>
// below the node's cgroup root) for its CPU quota and memory limit.
func wantPodCgroup(t *testing.T, p *v1.Pod, quota, mem string) {
	t.Helper()
	dir := filepath.Join(node.CgroupRoot(), "kubepods", "burstable", "pod"+string(p.UID))
	if cgroups.IsCgroup2UnifiedMode() {
		dir = filepath.Join("/sys/fs/cgroup", dir)
		if got := readCgroupFile(t, dir, "cpu.max") + " " + readCgroupFile(t, dir, "memory.max"); got != quota+" 100000 "+mem {
			t.Fatalf("pod cgroup cpu.max, memory.max = %q, want %q", got, quota+" 100000 "+mem)
		}
		return
	}
	got := readCgroupFile(t, filepath.Join("/sys/fs/cgroup", "cpu", dir), "cpu.cfs_quota_us") + " " +
		readCgroupFile(t, filepath.Join("/sys/fs/cgroup", "memory", dir), "memory.limit_in_bytes")
	if want := quota + " " + mem; got != want {
		t.Fatalf("pod cgroup cpu.cfs_quota_us, memory.limit_in_bytes = %q, want %q", got, want)
	}
}

// In-place resize through the resize subresource, as kubectl does it: a
// container with the default policy gets its new CPU and memory in its
// cgroup without a restart, and the status reports them; one whose memory
// policy is RestartContainer is restarted with the new limit; a resize
// larger than the node is Infeasible and changes nothing; a resize that
// does not fit beside another pod waits (Deferred) until that pod leaves;
// a restarted hostlet keeps the allocation and restarts nothing.
func TestInPlaceResize(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "resize", "sleep", "3600")
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Containers[0].Resources = cpuMem("100m", "200m", "32Mi", "64Mi")
	r := sleeper("r")
	r.Resources = cpuMem("100m", "200m", "32Mi", "64Mi")
	r.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	pod.Spec.Containers = append(pod.Spec.Containers, r)
	cluster.CreatePod(t, pod)
	p := waitReady(t, ns, pod.Name)
	if p.Status.QOSClass != v1.PodQOSBurstable {
		t.Fatalf("QoS class %s", p.Status.QOSClass)
	}
	c := containerStatusOf(p, "c")
	if !sameQuantities(c.AllocatedResources, pod.Spec.Containers[0].Resources.Requests) || c.Resources == nil {
		t.Fatalf("status before any resize: allocatedResources %v, resources %v", c.AllocatedResources, c.Resources)
	}
	wantCgroups(t, c, "102", "20000", "67108864")
	cID := c.ContainerID

	// Live: no restart, new cgroup values.
	live := cpuMem("300m", "400m", "48Mi", "128Mi")
	kubectlResize(t, ns, pod.Name, "c", live)
	p = waitFor(t, ns, pod.Name, 2*time.Minute, "resized live", resizedTo("c", live))
	c = containerStatusOf(p, "c")
	if c.ContainerID != cID || c.RestartCount != 0 {
		t.Fatalf("container restarted by a NotRequired resize: %s restarts %d (was %s)", c.ContainerID, c.RestartCount, cID)
	}
	wantCgroups(t, c, "307", "40000", "134217728")
	// The pod's cgroup grew with it, first (c's new limit would not fit in
	// the old one): c's 400m and 128Mi with r's 200m and 64Mi.
	wantPodCgroup(t, p, "60000", "201326592")
	// The container is still created NoSwap: memory+swap is its memory.
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
		if got := containerCgroup(t, c, "memory", "memory.memsw.limit_in_bytes"); got != "134217728" {
			t.Errorf("container c memory.memsw.limit_in_bytes = %s after the resize, want its memory limit 134217728", got)
		}
	}

	// RestartContainer for memory: a new instance with the new limit.
	restarted := cpuMem("100m", "200m", "32Mi", "96Mi")
	kubectlResize(t, ns, pod.Name, "r", restarted)
	p = waitFor(t, ns, pod.Name, 2*time.Minute, "r restarted by its resize", func(p *v1.Pod) bool {
		st := containerStatusOf(p, "r")
		return resizedTo("r", restarted)(p) && st.RestartCount == 1
	})
	wantCgroups(t, containerStatusOf(p, "r"), "102", "20000", "100663296")
	wantPodCgroup(t, p, "60000", "234881024")
	if st := containerStatusOf(p, "c"); st.RestartCount != 0 || st.ContainerID != cID {
		t.Fatalf("c restarted by r's resize: %+v", st)
	}

	// Infeasible: more CPU than the node has.
	huge := cpuMem("1000", "1000", "48Mi", "128Mi")
	kubectlResize(t, ns, pod.Name, "c", huge)
	p = waitFor(t, ns, pod.Name, time.Minute, "resize Infeasible", func(p *v1.Pod) bool {
		c := podCondition(p, v1.PodResizePending)
		return c != nil && c.Reason == v1.PodReasonInfeasible
	})
	if c := podCondition(p, v1.PodResizePending); !strings.HasPrefix(c.Message, "Node didn't have enough capacity: cpu, requested: 1000") {
		t.Errorf("Infeasible message %q", c.Message)
	}
	if st := containerStatusOf(p, "c"); !sameQuantities(st.AllocatedResources, live.Requests) {
		t.Errorf("allocatedResources %v after an infeasible resize, want %v", st.AllocatedResources, live.Requests)
	}
	wantCgroups(t, containerStatusOf(p, "c"), "307", "40000", "134217728")
	// Reverted: nothing is pending any more.
	kubectlResize(t, ns, pod.Name, "c", live)
	waitFor(t, ns, pod.Name, time.Minute, "the reverted resize no longer pending", resizedTo("c", live))

	// Deferred: all of the node's CPU while another pod holds some, until
	// that pod is deleted.
	other := busybox(ns, "other", "sleep", "3600")
	other.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	cluster.CreatePod(t, other)
	waitReady(t, ns, other.Name)
	nodeObj, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// c asks for all that the node's other pods (but the one to delete)
	// and r leave.
	all := nodeObj.Status.Allocatable.Cpu().DeepCopy()
	pods, err := cluster.Client().CoreV1().Pods("").List(ctxT(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range pods.Items {
		if o.Status.Phase == v1.PodSucceeded || o.Status.Phase == v1.PodFailed || (o.Namespace == ns && o.Name == other.Name) {
			continue
		}
		for _, oc := range o.Spec.Containers {
			if o.UID != p.UID || oc.Name != "c" {
				all.Sub(*oc.Resources.Requests.Cpu())
			}
		}
	}
	whole := cpuMem(all.String(), all.String(), "48Mi", "128Mi")
	kubectlResize(t, ns, pod.Name, "c", whole)
	waitFor(t, ns, pod.Name, time.Minute, "resize Deferred", func(p *v1.Pod) bool {
		c := podCondition(p, v1.PodResizePending)
		return c != nil && c.Reason == v1.PodReasonDeferred && strings.Contains(c.Message, "Node didn't have enough resource: cpu")
	})
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), other.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitFor(t, ns, pod.Name, 2*time.Minute, "the deferred resize admitted once the other pod left", resizedTo("c", whole))

	// The kubelet's events, with what was asked for at which generation.
	for _, ev := range []string{"ResizeStarted: Pod resize started: {", "ResizeCompleted: Pod resize completed: {",
		`ResizeInfeasible: Pod resize Infeasible: {"containers":[{"name":"c","resources":{"limits":{"cpu":"1k"`,
		"ResizeDeferred: Pod resize Deferred: {", "Killing: Container r resize requires restart"} {
		expectEvent(t, ns, pod.Name, ev)
	}

	// A restarted hostlet keeps the allocation and restarts nothing.
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	p = waitFor(t, ns, pod.Name, time.Minute, "the allocation kept over a restart", resizedTo("c", whole))
	if st := containerStatusOf(p, "c"); st.RestartCount != 0 || st.ContainerID != cID {
		t.Fatalf("c after hostlet's restart: %+v", st)
	}
	if st := containerStatusOf(p, "r"); st.RestartCount != 1 {
		t.Fatalf("r after hostlet's restart: restarts %d", st.RestartCount)
	}
}

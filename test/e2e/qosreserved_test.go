package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// qosReserved with the QOSReserved gate, as the kubelet's QoS container
// manager: the burstable QoS cgroup's memory limit is the allocatable
// memory (capacity less systemReserved) less the reserved share (here
// all) of the Guaranteed pods' requests, the besteffort one's that less the
// Burstable pods'; set before a pod's cgroup is made and again once a pod
// is gone.
func TestQOSReservedMemory(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-qosreserved"
	h := extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader +
		"featureGates:\n  QOSReserved: true\nqosReserved:\n  memory: 100%\nsystemReserved:\n  memory: 1Gi\n"})
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocatable := n.Status.Capacity.Memory().Value() - 1<<30
	ns := cluster.NewNamespace(t)
	pod := func(podName, cpu, request, limit string) {
		p := busybox(ns, podName, "sleep", "3600")
		p.Spec.NodeName = name
		p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(0))
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(request)},
			Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse(limit)},
		}
		if request == limit {
			p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		cluster.CreatePod(t, p)
		waitReady(t, ns, podName)
	}
	pod("guaranteed", "100m", "100Mi", "100Mi")
	pod("burstable", "100m", "50Mi", "200Mi")

	kubepods := filepath.Join(h.CgroupRoot(), "kubepods")
	file := "memory.limit_in_bytes"
	if cgroups.IsCgroup2UnifiedMode() {
		file = "memory.max"
	}
	limit := func(qos string) int64 {
		v, err := strconv.ParseInt(readCgroupFile(t, cgroupDir("memory", filepath.Join(kubepods, qos)), file), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The kernel keeps a limit in whole pages (cgroup v1).
	pages := func(b int64) int64 { return b - b%4096 }
	expect := func(what string, burstable, bestEffort int64) {
		t.Helper()
		pollUntil(t, 30*time.Second, what, func() bool {
			return limit("burstable") == pages(burstable) && limit("besteffort") == pages(bestEffort)
		})
	}
	defer func() {
		if t.Failed() {
			t.Logf("burstable %d besteffort %d, allocatable %d", limit("burstable"), limit("besteffort"), allocatable)
		}
	}()
	expect("the limits with both pods", allocatable-100<<20, allocatable-150<<20)
	removePod(t, ns, "guaranteed")
	expect(fmt.Sprintf("the limits without the Guaranteed pod (allocatable %d)", allocatable), allocatable, allocatable-50<<20)
	removePod(t, ns, "burstable")
}

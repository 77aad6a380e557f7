package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// cgroupDir is where a controller's hierarchy keeps cgroup rel: one dir
// per controller on v1.
func cgroupDir(controller, rel string) string {
	if cgroups.IsCgroup2UnifiedMode() {
		return filepath.Join("/sys/fs/cgroup", rel)
	}
	return filepath.Join("/sys/fs/cgroup", controller, rel)
}

func readCgroupFile(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	return strings.TrimSpace(string(b))
}

// A Burstable pod gets the kubelet's pod cgroup below kubepods/burstable
// with the pod-level CPU shares, quota and memory limit; its container and
// its PID namespace holder sit in leaves below it; deletion removes it.
func TestPodCgroups(t *testing.T) {
	skipIfNoCluster(t)
	v2 := cgroups.IsCgroup2UnifiedMode()
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "burstable", "sleep", "3600")
	pod.Spec.ShareProcessNamespace = ptrTo(true)
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	cluster.CreatePod(t, pod)
	p := waitFor(t, ns, pod.Name, 2*time.Minute, "running", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != ""
	})
	if p.Status.QOSClass != v1.PodQOSBurstable {
		t.Fatalf("QoS class %s", p.Status.QOSClass)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	kubepods := filepath.Join(node.CgroupRoot(), "kubepods")
	podCgroup := filepath.Join(kubepods, "burstable", "pod"+string(p.UID))

	at := cgroupDir
	for _, c := range []string{"cpu", "memory", "pids"} {
		procs := readCgroupFile(t, at(c, filepath.Join(podCgroup, id)), "cgroup.procs")
		if procs == "" {
			t.Errorf("%s: no process in the container's cgroup %s/%s", c, podCgroup, id)
		}
		pause := readCgroupFile(t, at(c, filepath.Join(podCgroup, "pause-"+string(p.UID))), "cgroup.procs")
		if pause == "" {
			t.Errorf("%s: the pod's PID namespace holder is not in its sandbox cgroup", c)
		}
	}
	// The kubelet's ResourceConfigForPod: shares from the 100m request,
	// quota from the 200m limit, the 64Mi limit.
	if v2 {
		for f, want := range map[string]string{"cpu.weight": "4", "cpu.max": "20000 100000", "memory.max": "67108864"} {
			if got := readCgroupFile(t, at("", podCgroup), f); got != want {
				t.Errorf("pod cgroup %s = %q, want %q", f, got, want)
			}
		}
	} else {
		for _, f := range []struct{ controller, file, want string }{
			{"cpu", "cpu.shares", "102"}, {"cpu", "cpu.cfs_quota_us", "20000"}, {"cpu", "cpu.cfs_period_us", "100000"},
			{"memory", "memory.limit_in_bytes", "67108864"},
		} {
			if got := readCgroupFile(t, at(f.controller, podCgroup), f.file); got != f.want {
				t.Errorf("pod cgroup %s = %q, want %q", f.file, got, f.want)
			}
		}
		// The QoS cgroups: burstable weighs its pods' requests (at least
		// this one's), besteffort the minimum.
		if s, _ := strconv.Atoi(readCgroupFile(t, at("cpu", filepath.Join(kubepods, "burstable")), "cpu.shares")); s < 102 {
			t.Errorf("burstable QoS cgroup cpu.shares = %d, want >= 102", s)
		}
		if s := readCgroupFile(t, at("cpu", filepath.Join(kubepods, "besteffort")), "cpu.shares"); s != "2" {
			t.Errorf("besteffort QoS cgroup cpu.shares = %s, want 2", s)
		}
	}

	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	// Cleanup runs once the pod is gone from the API.
	err := wait.PollUntilContextTimeout(ctxT(t), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, c := range []string{"cpu", "memory", "pids"} {
			if _, err := os.Stat(at(c, podCgroup)); !os.IsNotExist(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("pod cgroup %s still there after deletion", podCgroup)
	}
}

// Pod cgroups left by pods that are gone are swept when hostlet starts, as
// the kubelet's cleanupOrphanedPodCgroups: the cgroup of a pod deleted
// while hostlet was down, and one no container or pod directory points to
// any more, whose process is killed first.
func TestOrphanPodCgroupsSwept(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	cluster.CreatePod(t, busybox(ns, "cgorphan", "sleep", "3600"))
	p := waitPhase(t, ns, "cgorphan", v1.PodRunning)
	besteffort := filepath.Join(node.CgroupRoot(), "kubepods", "besteffort")
	podCgroup := filepath.Join(besteffort, "pod"+string(p.UID))
	// A pod cgroup alone, with a process in it.
	lone := filepath.Join(besteffort, "pod0b6e1f0c-aaaa-4bbb-8ccc-0000000000e2")
	sleep := exec.Command("sleep", "3600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleep.Wait() }()
	t.Cleanup(func() { _ = sleep.Process.Kill() })
	controllers := []string{"cpu", "memory", "pids"}
	for _, c := range controllers {
		if err := os.MkdirAll(cgroupDir(c, lone), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cgroupDir(c, lone), "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		if cgroups.IsCgroup2UnifiedMode() {
			break
		}
	}

	node.Kill()
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "cgorphan", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "cgorphan")
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, time.Minute, "the orphaned pod cgroups to be removed", func() bool {
		for _, c := range controllers {
			for _, d := range []string{podCgroup, lone} {
				if _, err := os.Stat(cgroupDir(c, d)); !os.IsNotExist(err) {
					return false
				}
			}
		}
		return true
	})
	// Its cgroup could go only once the process had left it: killed.
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Error("the process of the lone pod cgroup still runs")
	}
}

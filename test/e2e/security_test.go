package e2e

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runOutput runs a busybox pod to completion and returns its log.
func runOutput(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	cluster.CreatePod(t, pod)
	p := waitFor(t, pod.Namespace, pod.Name, 2*time.Minute, "finished", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	out, err := cluster.Kubectl(ctxT(t), "-n", pod.Namespace, "logs", pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod %s failed: %s", pod.Name, out)
	}
	return out
}

func TestSecurityContext(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)

	pod := busybox(ns, "ids", "id")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)), RunAsGroup: ptrTo(int64(2000)),
		SupplementalGroups: []int64{3000}, FSGroup: ptrTo(int64(4000))}
	if out := runOutput(t, pod); !strings.HasPrefix(out, "uid=1000(") || !strings.Contains(out, " gid=2000 ") || !strings.Contains(out, "3000") || !strings.Contains(out, "4000") {
		t.Errorf("id = %q", out)
	}

	pod = busybox(ns, "nnp", "sh", "-c", "grep -E 'NoNewPrivs|CapEff' /proc/self/status")
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false),
		Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}}
	if out := runOutput(t, pod); !strings.Contains(out, "NoNewPrivs:\t1") || !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("status = %q", out)
	}

	pod = busybox(ns, "ro", "sh", "-c", "touch /x 2>&1; echo done")
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ReadOnlyRootFilesystem: ptrTo(true)}
	if out := runOutput(t, pod); !strings.Contains(out, "Read-only file system") {
		t.Errorf("read-only root: %q", out)
	}

	// Changing a link needs CAP_NET_ADMIN, which only a privileged
	// container has by default.
	pod = busybox(ns, "priv", "sh", "-c", "ip link set lo mtu 1400 && echo added")
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Privileged: ptrTo(true)}
	if out := runOutput(t, pod); !strings.Contains(out, "added") {
		t.Errorf("privileged: %q", out)
	}

	pod = busybox(ns, "nonroot", "true")
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsNonRoot: ptrTo(true)}
	cluster.CreatePod(t, pod)
	p := waitFor(t, ns, "nonroot", time.Minute, "config error", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
	})
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.HasPrefix(msg, "container has runAsNonRoot and image will run as root") {
		t.Errorf("message %q", msg)
	}
}

func TestResourceLimits(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "limits", "sh", "-c",
		"cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; "+
			"cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max; cat /proc/self/oom_score_adj")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi"), v1.ResourceCPU: resource.MustParse("250m")},
	}
	out := runOutput(t, pod)
	lines := strings.Fields(out)
	if len(lines) != 3 || lines[0] != "67108864" || lines[1] != "25000" {
		t.Fatalf("cgroup limits and oom score: %q", out)
	}
	// Guaranteed asks for -997; without CAP_SYS_RESOURCE it is raised to
	// hostlet's own score, never below.
	t.Logf("oom_score_adj of a Guaranteed container: %s", lines[2])

	be := busybox(ns, "besteffort", "cat", "/proc/self/oom_score_adj")
	if out := runOutput(t, be); out != "1000\n" {
		t.Errorf("BestEffort oom_score_adj %q", out)
	}
}

// Volumes belong to the pod's fsGroup: a non-root container reads a 0440
// secret and writes to an emptyDir through the group.
func TestFSGroupVolumes(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	if _, err := cluster.Client().CoreV1().Secrets(ns).Create(ctxT(t), &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"k": "secret-value"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "fsgroup", "sh", "-c", "cat /s/k; echo; ls -ln /s/..data/k | cut -c1-10; stat -c %g /s/..data/k; touch /e/x && stat -c %g /e/x")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)), FSGroup: ptrTo(int64(1001))}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s", DefaultMode: ptrTo(int32(0o440))}}},
		{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "s", MountPath: "/s"}, {Name: "e", MountPath: "/e"}}
	out := runOutput(t, pod)
	if want := "secret-value\n-r--r-----\n1001\n1001\n"; out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
}

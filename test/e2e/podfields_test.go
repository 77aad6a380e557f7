package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeSupportsRRO is what the node says of its default handler.
func nodeSupportsRRO(t *testing.T) bool {
	t.Helper()
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range n.Status.RuntimeHandlers {
		if h.Name == "" && h.Features != nil && h.Features.RecursiveReadOnlyMounts != nil {
			return *h.Features.RecursiveReadOnlyMounts
		}
	}
	t.Fatalf("node reports no default runtime handler: %+v", n.Status.RuntimeHandlers)
	return false
}

// A read-only hostPath volume with a tmpfs mounted below it: recursive
// read-only makes the submount read-only too where the runtime and kernel
// can (runc's rro), a plain read-only mount leaves it writable (the
// kubelet's IfPossible fallback); Enabled where they cannot is the
// kubelet's CreateContainerConfigError.
func TestPodFieldsRecursiveReadOnly(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })

	supported := nodeSupportsRRO(t)
	t.Logf("node reports recursive read-only mounts: %v", supported)
	mk := func(name string, mode v1.RecursiveReadOnlyMode) *v1.Pod {
		pod := busybox(ns, name, "sh", "-c", "touch /mnt/top 2>&1; touch /mnt/sub/x 2>&1; echo done")
		pod.Spec.Volumes = []v1.Volume{{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/mnt", ReadOnly: true, RecursiveReadOnly: &mode}}
		return pod
	}
	// recursiveReadOnly of the one mount as the container status has it.
	statusMode := func(p *v1.Pod) v1.RecursiveReadOnlyMode {
		t.Helper()
		if len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("container statuses: %+v", p.Status.ContainerStatuses)
		}
		var vm v1.VolumeMountStatus
		for _, m := range p.Status.ContainerStatuses[0].VolumeMounts {
			if m.Name == "host" {
				vm = m
			}
		}
		if vm.Name != "host" || vm.MountPath != "/mnt" || !vm.ReadOnly || vm.RecursiveReadOnly == nil {
			t.Fatalf("volumeMount status %+v", vm)
		}
		return *vm.RecursiveReadOnly
	}

	out := runOutput(t, mk("ifpossible", v1.RecursiveReadOnlyIfPossible))
	if n := strings.Count(out, "Read-only file system"); !strings.Contains(out, "done") || (supported && n != 2) || (!supported && n != 1) {
		t.Fatalf("IfPossible (rro %v): %q", supported, out)
	}
	p, _ := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "ifpossible", metav1.GetOptions{})
	want := v1.RecursiveReadOnlyDisabled
	if supported {
		want = v1.RecursiveReadOnlyEnabled
	}
	if got := statusMode(p); got != want {
		t.Errorf("IfPossible: status recursiveReadOnly %s, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(sub, "x")); supported == (err == nil) {
		t.Errorf("the submount written: %v (rro %v)", err == nil, supported)
	}

	if supported {
		out := runOutput(t, mk("enabled", v1.RecursiveReadOnlyEnabled))
		if strings.Count(out, "Read-only file system") != 2 {
			t.Fatalf("Enabled: %q", out)
		}
	} else {
		cluster.CreatePod(t, mk("enabled", v1.RecursiveReadOnlyEnabled))
		p := waitFor(t, ns, "enabled", time.Minute, "config error", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; msg != `failed to resolve recursive read-only mode: volume "host" requested recursive read-only mode, but it is not supported by the runtime` {
			t.Errorf("message %q", msg)
		}
	}

	// Not read-only: refused whatever the runtime.
	pod := mk("writable", v1.RecursiveReadOnlyIfPossible)
	pod.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
	if _, err := cluster.Client().CoreV1().Pods(ns).Create(ctxT(t), pod, metav1.CreateOptions{}); err == nil {
		// The API server validates it too; a server that did not is
		// answered by the node as the kubelet would.
		p := waitFor(t, ns, "writable", time.Minute, "config error", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		t.Logf("writable: %s", p.Status.ContainerStatuses[0].State.Waiting.Message)
	}
}

// supplementalGroupsPolicy as the kubelet's e2e checks it: user 1000, whom
// the image's /etc/group puts in 50000, with supplementalGroups 60000 gets
// "1000 50000 60000" under Merge and "1000 60000" under Strict, in `id -G`
// and in the container status's user.linux; the node says it has the
// feature.
func TestPodFieldsSupplementalGroupsPolicy(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// busybox whose /etc/group puts user 1000 in group 50000.
	const ref = "hostlet.local/busybox-groups:1"
	img, err := images.BuildBusyboxWith(ctxT(t), t.TempDir(), ref, map[string][]byte{
		"etc/group": []byte("root:x:0:\nnobody:x:65534:\nuser:x:1000:\nimagegroup:x:50000:user\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.ImportImage(ctxT(t), img.Archive); err != nil {
		t.Fatal(err)
	}
	if f := n.Status.Features; f == nil || f.SupplementalGroupsPolicy == nil || !*f.SupplementalGroupsPolicy {
		t.Errorf("node status.features %+v", f)
	}
	for _, c := range []struct {
		name   string
		policy *v1.SupplementalGroupsPolicy
		want   []int64
	}{
		{"unset", nil, []int64{1000, 50000, 60000}},
		{"merge", ptrTo(v1.SupplementalGroupsPolicyMerge), []int64{1000, 50000, 60000}},
		{"strict", ptrTo(v1.SupplementalGroupsPolicyStrict), []int64{1000, 60000}},
	} {
		pod := busybox(ns, c.name, "sh", "-c", "id -G; exec sleep 3600")
		pod.Spec.Containers[0].Image = ref
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(0))
		pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)),
			SupplementalGroups: []int64{60000}, SupplementalGroupsPolicy: c.policy}
		cluster.CreatePod(t, pod)
		p := waitFor(t, ns, c.name, 2*time.Minute, "running with a user", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil &&
				p.Status.ContainerStatuses[0].User != nil
		})
		u := p.Status.ContainerStatuses[0].User.Linux
		if u == nil || u.UID != 1000 || u.GID != 1000 || !slices.Equal(u.SupplementalGroups, c.want) {
			t.Errorf("%s: status user.linux %+v, want uid 1000 gid 1000 groups %v", c.name, u, c.want)
		}
		want := make([]string, len(c.want))
		for i, g := range c.want {
			want[i] = strconv.FormatInt(g, 10)
		}
		out := podLogHas(t, ctxT(t), ns, c.name, "\n")
		if got := strings.TrimSpace(out); got != strings.Join(want, " ") {
			t.Errorf("%s: id -G = %q, want %q", c.name, got, strings.Join(want, " "))
		}
	}
}

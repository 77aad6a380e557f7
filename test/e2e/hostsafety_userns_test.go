package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// usernsPod is a busybox pod with hostUsers: false and an emptyDir at /data.
func usernsPod(ns, name, script string) *v1.Pod {
	pod := busybox(ns, name, "sh", "-c", script)
	pod.Spec.HostUsers = ptrTo(false)
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return pod
}

// uidMapOf parses the first line of a uid_map printed as "uid_map: a b c".
func uidMapOf(t *testing.T, out string) (inside, host, size uint64) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "uid_map:")); strings.HasPrefix(line, "uid_map:") && len(f) == 3 {
			inside, _ = strconv.ParseUint(f[0], 10, 64)
			host, _ = strconv.ParseUint(f[1], 10, 64)
			size, _ = strconv.ParseUint(f[2], 10, 64)
			return
		}
	}
	t.Fatalf("no uid_map in %q", out)
	return
}

// runUserns runs a hostUsers: false pod to completion. A host that cannot
// give pods user namespaces must refuse the pod with the kubelet's sandbox
// error and never run it: then the test is skipped.
func runUserns(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	cluster.CreatePod(t, pod)
	var refused string
	p := waitFor(t, pod.Namespace, pod.Name, 2*time.Minute, "finished or refused", func(p *v1.Pod) bool {
		for _, e := range events(t, pod.Namespace, pod.Name) {
			if strings.HasPrefix(e, "FailedCreatePodSandBox: ") {
				refused = e
				return true
			}
		}
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if refused != "" {
		if !strings.Contains(refused, "can't set `spec.hostUsers: false`, runtime does not support user namespaces") {
			t.Fatalf("refused with %q", refused)
		}
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting == nil {
			t.Fatalf("refused pod ran: %+v", p.Status.ContainerStatuses[0].State)
		}
		t.Skipf("host cannot run user namespaces: %s", refused)
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", pod.Namespace, "logs", pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod %s failed: %s\n%s\nevents: %q", pod.Name, out, harness.DescribePodStatus(p), events(t, pod.Namespace, pod.Name))
	}
	return out
}

// A pod with hostUsers: false runs in its own user namespace: not the
// identity map of the host, a 65536-ID block of its own, persisted in the
// pod dir; its volume is idmapped, so what it writes carries the IDs it sees
// on the host too, not the high host IDs. A pod that ended gives its block
// and its volumes back, as the kubelet's SyncTerminatedPod.
func TestHostSafetyUserNamespace(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	script := "echo uid_map: $(cat /proc/self/uid_map); echo gid_map: $(cat /proc/self/gid_map); " +
		"touch /data/root-file && echo owner: $(stat -c %u:%g /data/root-file); echo id: $(id -u)"
	bpod := usernsPod(ns, "userns-b", script)
	bpod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)), RunAsGroup: ptrTo(int64(1000))}
	bpod.Spec.Volumes[0].EmptyDir.Medium = v1.StorageMediumMemory
	outB := runUserns(t, bpod)
	// a stays running, so that its pod dir can be looked at.
	a := usernsPod(ns, "userns-a", script+"; sleep 3600")
	cluster.CreatePod(t, a)
	waitPhase(t, ns, a.Name, v1.PodRunning)
	var out string
	pollUntil(t, time.Minute, "the output of "+a.Name, func() bool {
		out, _ = cluster.Kubectl(ctxT(t), "-n", ns, "logs", a.Name)
		return strings.Contains(out, "id: ")
	})
	inside, host, size := uidMapOf(t, out)
	if inside != 0 || host == 0 || size == 4294967295 {
		t.Fatalf("uid_map of a hostUsers: false pod: %q", out)
	}
	if host%65536 != 0 || host < 65536 || size != 65536 {
		t.Errorf("mapping %d %d %d: want a 65536-aligned block of 65536 IDs above the host's own", inside, host, size)
	}
	if !strings.Contains(out, "owner: 0:0") || !strings.Contains(out, "id: 0") {
		t.Errorf("root in the pod: %q", out)
	}
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), a.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podDir := filepath.Join(node.RootDir(), "pods", string(p.UID))
	// The idmapped emptyDir: the pod's root wrote a file owned by 0 on the
	// host's disk, not by the pod's host ID.
	if fi, err := os.Stat(filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "data", "root-file")); err != nil {
		t.Errorf("file written by the pod: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
		t.Errorf("file written by the pod's root is %d:%d on the host, want 0:0 (idmapped)", st.Uid, st.Gid)
	}
	// The allocation is kept in the pod dir in the kubelet's format.
	b, err := os.ReadFile(filepath.Join(podDir, "userns"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		UIDMappings []struct{ HostID, ContainerID, Length uint64 } `json:"uidMappings"`
	}
	if err := json.Unmarshal(b, &m); err != nil || len(m.UIDMappings) != 1 || m.UIDMappings[0].HostID != host {
		t.Errorf("userns file %s (%v), want host ID %d", b, err, host)
	}

	// A second pod got a block of its own; a non-root user keeps its ID
	// on the idmapped volume. It ended: its block file and its volume are
	// gone with its pod still there.
	_, hostB, _ := uidMapOf(t, outB)
	if hostB == host || (hostB < host+65536 && host < hostB+65536) {
		t.Errorf("two pods overlap: %d and %d", host, hostB)
	}
	if !strings.Contains(outB, "owner: 1000:1000") || !strings.Contains(outB, "id: 1000") {
		t.Errorf("runAsUser 1000 in a user namespace on a tmpfs emptyDir: %q", outB)
	}
	pb, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), bpod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "the block and volume of the ended pod released", func() bool {
		dir := filepath.Join(node.RootDir(), "pods", string(pb.UID))
		_, errU := os.Stat(filepath.Join(dir, "userns"))
		_, errV := os.Stat(filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", "data"))
		return os.IsNotExist(errU) && os.IsNotExist(errV)
	})

	// Deleting the pod frees its block and its file.
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), a.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, a.Name)
	pollUntil(t, 30*time.Second, "pod dir of the deleted pod removed", func() bool {
		_, err := os.Stat(filepath.Join(podDir, "userns"))
		return os.IsNotExist(err)
	})
}

// procMount Unmasked: /proc is left unmasked only inside the pod's own user
// namespace, where /proc/sys is writable for what the pod's namespaces own
// and nothing of the host's. The API server refuses it without hostUsers:
// false anyway.
func TestHostSafetyUnmaskedProc(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	script := "grep ' /proc/sys ' /proc/self/mounts | cut -d' ' -f4 | cut -d, -f1 | sed 's/^/sys-mount: /'; " +
		"f=/proc/sys/net/ipv4/ip_unprivileged_port_start; cat $f > /tmp/v && cat /tmp/v > $f && echo netns-sysctl: written; " +
		"cat /proc/sys/kernel/printk > /proc/sys/kernel/printk 2>/dev/null && echo printk: written || echo printk: refused; " +
		"echo kcore: $(head -c 16 /proc/kcore 2>/dev/null | wc -c)"
	pod := usernsPod(ns, "unmasked", script)
	// CAP_NET_ADMIN in the pod's user namespace covers only its own network
	// namespace.
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ProcMount: ptrTo(v1.UnmaskedProcMount),
		Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}}}
	out := runUserns(t, pod)
	if strings.Contains(out, "sys-mount: ro") {
		t.Errorf("Unmasked /proc in a user namespace still has /proc/sys read-only: %q", out)
	}
	if !strings.Contains(out, "netns-sysctl: written") {
		t.Errorf("a sysctl of the pod's own network namespace is not writable: %q", out)
	}
	if !strings.Contains(out, "printk: refused") {
		t.Errorf("a host-wide sysctl was writable from the pod: %q", out)
	}

	host := busybox(ns, "unmasked-host", "true")
	host.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ProcMount: ptrTo(v1.UnmaskedProcMount)}
	if _, err := cluster.Client().CoreV1().Pods(ns).Create(ctxT(t), host, metav1.CreateOptions{}); err == nil {
		t.Errorf("API server accepted procMount Unmasked with the host's users")
	} else if !strings.Contains(err.Error(), "procMount") {
		t.Logf("refused: %v", err)
	}
}

// The masked and read-only /proc paths as CRI sets them, for a default pod.
func TestHostSafetyMaskedProc(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "masked", "sh", "-c",
		"echo kcore: $(head -c 16 /proc/kcore 2>/dev/null | wc -c); echo keys: $(cat /proc/keys 2>/dev/null | wc -c); "+
			"grep -E ' /proc/(sys|bus|fs|irq|sysrq-trigger) ' /proc/self/mounts | cut -d' ' -f2,4 | cut -d, -f1")
	out := runOutput(t, pod)
	want := []string{"kcore: 0", "keys: 0", "/proc/sys ro", "/proc/bus ro", "/proc/fs ro", "/proc/irq ro"}
	// runc protects only the paths the kernel has (not sysrq without
	// CONFIG_MAGIC_SYSRQ).
	if _, err := os.Stat("/proc/sysrq-trigger"); err == nil {
		want = append(want, "/proc/sysrq-trigger ro")
	}
	for _, want := range want {
		if !strings.Contains(out, want) {
			t.Errorf("default /proc: want %q in %q", want, out)
		}
	}
}

// seccomp as the kubelet hands it to containerd's CRI: RuntimeDefault is
// containerd's profile (it refuses unshare without CAP_SYS_ADMIN),
// Unconfined none, Localhost a file under <root-dir>/seccomp, and a missing
// one the container's CreateContainerError.
func TestHostSafetySeccomp(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	script := "grep Seccomp: /proc/self/status; unshare -U true 2>/dev/null && echo unshare: ok || echo unshare: refused"

	def := busybox(ns, "seccomp-default", "sh", "-c", script)
	def.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}}
	if out := runOutput(t, def); !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "unshare: refused") {
		t.Errorf("RuntimeDefault: %q", out)
	}

	// The container's field wins over the pod's.
	unconf := busybox(ns, "seccomp-unconfined", "sh", "-c", script)
	unconf.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}}
	unconf.Spec.Containers[0].SecurityContext = &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}}
	if out := runOutput(t, unconf); !strings.Contains(out, "Seccomp:\t0") || !strings.Contains(out, "unshare: ok") {
		t.Errorf("Unconfined: %q", out)
	}

	dir := filepath.Join(node.RootDir(), "seccomp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "e2e-no-mkdir-"+ns+".json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(profile) })
	local := busybox(ns, "seccomp-localhost", "sh", "-c", "mkdir /tmp/x 2>/dev/null && echo mkdir: ok || echo mkdir: refused")
	local.Spec.Containers[0].SecurityContext = &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{
		Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptrTo(filepath.Base(profile))}}
	if out := runOutput(t, local); !strings.Contains(out, "mkdir: refused") {
		t.Errorf("Localhost profile: %q", out)
	}

	missing := busybox(ns, "seccomp-missing", "true")
	missing.Spec.Containers[0].SecurityContext = &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{
		Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptrTo("missing.json")}}
	cluster.CreatePod(t, missing)
	w := waitWaiting(t, ns, missing.Name, "CreateContainerError")
	want := `cannot load seccomp profile "` + filepath.Join(dir, "missing.json") + `"`
	if !strings.Contains(w.Message, want) || !strings.HasPrefix(w.Message, "failed to generate container ") {
		t.Errorf("missing Localhost profile: %q, want it to contain %q", w.Message, want)
	}
}

// AppArmor as the kubelet admits it: on a host without AppArmor a pod that
// asks for a profile (field or deprecated annotation) is refused with the
// kubelet's reason; Unconfined runs.
func TestHostSafetyAppArmor(t *testing.T) {
	skipIfNoCluster(t)
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil && strings.HasPrefix(string(b), "Y") {
		t.Skip("AppArmor is enabled on this host; the refusal cannot be shown")
	}
	ns := cluster.NewNamespace(t)
	field := busybox(ns, "apparmor-field", "true")
	field.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
	annotated := busybox(ns, "apparmor-annotation", "true")
	annotated.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "localhost/k8s-e2e"}
	for _, pod := range []*v1.Pod{field, annotated} {
		cluster.CreatePod(t, pod)
		p := waitPhase(t, ns, pod.Name, v1.PodFailed)
		if p.Status.Reason != "AppArmor" || p.Status.Message != "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Errorf("%s: %s: %s", pod.Name, p.Status.Reason, p.Status.Message)
		}
		expectEvent(t, ns, pod.Name, "AppArmor: Cannot enforce AppArmor")
	}
	unconf := busybox(ns, "apparmor-unconfined", "true")
	unconf.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}}
	runOutput(t, unconf)
}

// All containers of a hostUsers: false pod share its user namespace (and the
// PID namespace when asked), whose PID 1 is not the host's root; a crash and
// restart of hostlet keeps the running pod's mapping and never gives its IDs
// to another pod.
func TestHostSafetyUserNamespaceSharedAndRestart(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "userns-shared"},
		Spec: v1.PodSpec{HostUsers: ptrTo(false), ShareProcessNamespace: ptrTo(true), Containers: []v1.Container{
			sleeper("a"), {Name: "b", Image: busybox(ns, "", "").Spec.Containers[0].Image, Command: []string{"sleep", "4242"}},
		}},
	}
	cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)
	mapA := execIn(t, ns, pod.Name, "a", "cat", "/proc/self/uid_map")
	if mapB := execIn(t, ns, pod.Name, "b", "cat", "/proc/self/uid_map"); mapA != mapB || strings.Fields(mapA)[1] == "0" {
		t.Fatalf("uid_map of a %q, of b %q", mapA, mapB)
	}
	if a, b := execIn(t, ns, pod.Name, "a", "readlink", "/proc/self/ns/user"), execIn(t, ns, pod.Name, "b", "readlink", "/proc/self/ns/user"); a != b {
		t.Errorf("user namespaces differ: %q vs %q", a, b)
	}
	// PID 1 of the pod (hostlet's holder) is the pod's root and sits in an
	// empty directory: /proc/1/root leads nowhere on the host.
	if out := execIn(t, ns, pod.Name, "a", "sh", "-c", "echo root: $(ls -A /proc/1/root/ 2>/dev/null); grep Uid: /proc/1/status"); !strings.HasPrefix(out, "root:\n") || !strings.Contains(out, "Uid:\t0\t0\t0\t0") {
		t.Errorf("the pod's PID 1: %q", out)
	}
	before := status(waitPhase(t, ns, pod.Name, v1.PodRunning), "a")

	node.Kill()
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now := status(p, "a"); now.ContainerID != before.ContainerID || now.RestartCount != before.RestartCount {
		t.Errorf("container changed across the restart: %+v -> %+v", before, now)
	}
	if again := execIn(t, ns, pod.Name, "b", "cat", "/proc/self/uid_map"); again != mapA {
		t.Errorf("uid_map after restart %q, before %q", again, mapA)
	}
	out := runUserns(t, usernsPod(ns, "userns-after", "echo uid_map: $(cat /proc/self/uid_map)"))
	_, host, _ := uidMapOf(t, out)
	if fmt.Sprint(host) == strings.Fields(mapA)[1] {
		t.Errorf("a new pod got the running pod's IDs %d after a restart", host)
	}
	// Deleting the pod ends its PID 1 and releases its namespaces.
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	pollUntil(t, 30*time.Second, "the pod's PID 1 gone", func() bool { return !pauseRunning(node.RootDir()) })
}

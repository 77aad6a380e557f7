package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// execIn runs cmd in a container of a pod through kubectl exec.
func execIn(t *testing.T, ns, pod, container string, cmd ...string) string {
	t.Helper()
	out, err := cluster.Kubectl(ctxT(t), append([]string{"-n", ns, "exec", pod, "-c", container, "--"}, cmd...)...)
	if err != nil {
		t.Fatalf("exec %v in %s/%s[%s]: %v", cmd, ns, pod, container, err)
	}
	return out
}

func waitReady(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	p, err := cluster.WaitForPod(ctxT(t), ns, name, 2*time.Minute, harness.PodReady)
	if err != nil {
		t.Fatalf("pod %s/%s never Ready: %v", ns, name, err)
	}
	return p
}

func sleeper(name string) v1.Container {
	return v1.Container{Name: name, Image: images.BusyboxRef, Command: []string{"sleep", "3600"}}
}

// The containers of a pod share its network (localhost), IPC (incl.
// /dev/shm) and UTS namespaces, and the pod's IPs are reported in status.
func TestSandboxSharedNamespaces(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: v1.PodSpec{Containers: []v1.Container{
			{Name: "web", Image: images.TestappRef, Args: []string{"--http=:8080"}},
			sleeper("a"), sleeper("b"),
		}},
	}
	cluster.CreatePod(t, pod)
	got := waitReady(t, ns, pod.Name)

	if got.Status.PodIP == "" || got.Status.PodIP == "127.0.0.1" {
		t.Errorf("podIP %q is not from CNI", got.Status.PodIP)
	}
	if len(got.Status.PodIPs) == 0 || got.Status.PodIPs[0].IP != got.Status.PodIP {
		t.Errorf("podIPs %v do not start with podIP %s", got.Status.PodIPs, got.Status.PodIP)
	}
	if got.Status.HostIP != "127.0.0.1" || len(got.Status.HostIPs) == 0 || got.Status.HostIPs[0].IP != "127.0.0.1" {
		t.Errorf("hostIP %q hostIPs %v, want the node IP 127.0.0.1", got.Status.HostIP, got.Status.HostIPs)
	}

	if out := execIn(t, ns, pod.Name, "a", "wget", "-qO-", "http://localhost:8080/healthz"); !strings.Contains(out, "ok") {
		t.Errorf("localhost:8080 from a sibling container = %q", out)
	}
	for _, nsType := range []string{"net", "ipc", "uts"} {
		a := execIn(t, ns, pod.Name, "a", "readlink", "/proc/self/ns/"+nsType)
		b := execIn(t, ns, pod.Name, "b", "readlink", "/proc/self/ns/"+nsType)
		host, _ := os.Readlink("/proc/self/ns/" + nsType)
		if a != b {
			t.Errorf("%s namespace differs between containers: %q vs %q", nsType, a, b)
		}
		if strings.TrimSpace(a) == host {
			t.Errorf("%s namespace of the pod is the host's", nsType)
		}
	}
	// PID namespaces stay per container without shareProcessNamespace.
	if a, b := execIn(t, ns, pod.Name, "a", "readlink", "/proc/self/ns/pid"), execIn(t, ns, pod.Name, "b", "readlink", "/proc/self/ns/pid"); a == b {
		t.Errorf("containers share a PID namespace without shareProcessNamespace")
	}
	execIn(t, ns, pod.Name, "a", "sh", "-c", "echo shared > /dev/shm/x")
	if out := execIn(t, ns, pod.Name, "b", "cat", "/dev/shm/x"); out != "shared\n" {
		t.Errorf("/dev/shm not shared: %q", out)
	}
	if out := execIn(t, ns, pod.Name, "b", "hostname"); out != "shared\n" {
		t.Errorf("hostname = %q, want the pod name", out)
	}
	hosts := execIn(t, ns, pod.Name, "a", "cat", "/etc/hosts")
	if !strings.Contains(hosts, got.Status.PodIP+"\tshared\n") || !strings.HasPrefix(hosts, "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n") {
		t.Errorf("/etc/hosts:\n%s", hosts)
	}
}

// hostname, subdomain and setHostnameAsFQDN shape the hostname and
// /etc/hosts as with the kubelet; hostAliases are appended.
func TestSandboxHostname(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	fqdn := true
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"},
		Spec: v1.PodSpec{
			Hostname: "web-0", Subdomain: "web",
			SetHostnameAsFQDN: &fqdn,
			HostAliases:       []v1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}},
			Containers:        []v1.Container{sleeper("a"), sleeper("b")},
		},
	}
	cluster.CreatePod(t, pod)
	got := waitReady(t, ns, pod.Name)
	want := "web-0.web." + ns + ".svc.cluster.local"
	for _, c := range []string{"a", "b"} {
		if out := execIn(t, ns, pod.Name, c, "hostname"); out != want+"\n" {
			t.Errorf("hostname in %s = %q, want %q", c, out, want)
		}
	}
	hosts := execIn(t, ns, pod.Name, "a", "cat", "/etc/hosts")
	if !strings.Contains(hosts, got.Status.PodIP+"\t"+want+"\tweb-0\n") {
		t.Errorf("/etc/hosts lacks the FQDN line:\n%s", hosts)
	}
	if !strings.HasSuffix(hosts, "\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n") {
		t.Errorf("/etc/hosts lacks the host aliases:\n%s", hosts)
	}
}

// A hostNetwork pod runs in the host's network and UTS namespaces, with the
// node IP as its IP.
func TestSandboxHostNetwork(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostnet"},
		Spec: v1.PodSpec{HostNetwork: true, HostIPC: true,
			Containers: []v1.Container{sleeper("a"), sleeper("b")}},
	}
	cluster.CreatePod(t, pod)
	got := waitReady(t, ns, pod.Name)
	if got.Status.PodIP != "127.0.0.1" || got.Status.PodIP != got.Status.HostIP {
		t.Errorf("podIP %q hostIP %q, want both the node IP", got.Status.PodIP, got.Status.HostIP)
	}
	for _, nsType := range []string{"net", "uts", "ipc"} {
		host, _ := os.Readlink("/proc/self/ns/" + nsType)
		if out := execIn(t, ns, pod.Name, "a", "readlink", "/proc/self/ns/"+nsType); strings.TrimSpace(out) != host {
			t.Errorf("%s namespace %q, want the host's %q", nsType, out, host)
		}
	}
	hn, _ := os.Hostname()
	if out := execIn(t, ns, pod.Name, "b", "hostname"); out != hn+"\n" {
		t.Errorf("hostname = %q, want the host's %q", out, hn)
	}
	// ClusterFirst on the host network means the host's resolvers.
	resolv := execIn(t, ns, pod.Name, "a", "cat", "/etc/resolv.conf")
	host, _ := os.ReadFile("/etc/resolv.conf")
	for _, l := range strings.Split(string(host), "\n") {
		if strings.HasPrefix(l, "nameserver ") && !strings.Contains(resolv, l+"\n") {
			t.Errorf("hostNetwork pod resolv.conf lacks %q:\n%s", l, resolv)
		}
	}
}

// dnsPolicy None takes dnsConfig verbatim; ClusterFirst without cluster DNS
// falls back to Default with a MissingClusterDNS event.
func TestSandboxDNS(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	two := "2"
	none := busybox(ns, "dns-none", "sleep", "3600")
	none.Spec.DNSPolicy = v1.DNSNone
	none.Spec.DNSConfig = &v1.PodDNSConfig{
		Nameservers: []string{"1.2.3.4", "5.6.7.8"},
		Searches:    []string{"a.example", "b.example"},
		Options:     []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}},
	}
	cluster.CreatePod(t, none)
	first := busybox(ns, "dns-cf", "sleep", "3600")
	cluster.CreatePod(t, first)
	waitReady(t, ns, none.Name)
	want := "search a.example b.example\nnameserver 1.2.3.4\nnameserver 5.6.7.8\noptions ndots:2 edns0\n"
	if out := execIn(t, ns, none.Name, "c", "cat", "/etc/resolv.conf"); out != want {
		t.Errorf("dnsPolicy None resolv.conf:\n%s\nwant:\n%s", out, want)
	}
	waitReady(t, ns, first.Name)
	waitEvent(t, ns, first.Name, "MissingClusterDNS")
}

// waitEvent waits for an event with reason on the pod and returns its message.
func waitEvent(t *testing.T, ns, pod, reason string) string {
	t.Helper()
	var found string
	awaitEvent(t, ns, pod, func(r, msg string) bool {
		found = msg
		return r == reason
	})
	return found
}

// shareProcessNamespace: the containers see each other's processes.
func TestSandboxShareProcessNamespace(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	share := true
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pidshare"},
		Spec: v1.PodSpec{ShareProcessNamespace: &share, Containers: []v1.Container{
			sleeper("a"), {Name: "b", Image: images.BusyboxRef, Command: []string{"sleep", "4242"}},
		}},
	}
	cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)
	if a, b := execIn(t, ns, pod.Name, "a", "readlink", "/proc/self/ns/pid"), execIn(t, ns, pod.Name, "b", "readlink", "/proc/self/ns/pid"); a != b {
		t.Errorf("PID namespaces differ: %q vs %q", a, b)
	}
	ps := execIn(t, ns, pod.Name, "a", "ps", "-o", "pid,args")
	if !strings.Contains(ps, "sleep 4242") || !regexp.MustCompile(`(?m)^\s*1 `).MatchString(ps) {
		t.Errorf("ps in a:\n%s", ps)
	}
	// The namespace is released with the pod.
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	deadline := time.Now().Add(30 * time.Second)
	for pauseRunning(node.RootDir()) {
		if time.Now().After(deadline) {
			t.Fatal("pause process of the deleted pod still running")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pauseRunning reports whether a hostlet pause process under root runs.
func pauseRunning(root string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(string(b), "\x00")
		if len(args) >= 3 && args[1] == "pause" && strings.HasPrefix(args[2], root) {
			return true
		}
	}
	return false
}

package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
)

// A CIS-hardened node's KubeletConfiguration runs unchanged (hostlet
// refused every one of these fields): the kubelet API serves TLS 1.3 only,
// a container that names no seccomp profile runs with the runtime's
// default one, and each pod's cgroup holds at most podPidsLimit processes.
func TestHardenedKubeletConfig(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-hardened"
	h := extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + `tlsMinVersion: VersionTLS13
tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
seccompDefault: true
podPidsLimit: 64
allowedUnsafeSysctls: [kernel.msgmax, "net.core.*"]
`})
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(h.Port()))
	dial := func(max uint16) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: max})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(tls.VersionTLS12); err == nil {
		t.Error("the kubelet API served TLS 1.2 under tlsMinVersion VersionTLS13")
	}
	if err := dial(tls.VersionTLS13); err != nil {
		t.Errorf("TLS 1.3: %v", err)
	}

	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "plain", "sleep", "3600")
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, pod.Name, v1.PodRunning)
	// Seccomp mode 2: a filter, the runtime's default profile.
	if out := execIn(t, ns, pod.Name, "c", "grep", "^Seccomp:", "/proc/self/status"); strings.Fields(out)[1] != "2" {
		t.Errorf("a container naming no profile under seccompDefault: %q, want mode 2", out)
	}
	podCgroup := filepath.Join(h.CgroupRoot(), "kubepods", "besteffort", "pod"+string(p.UID))
	if got := readCgroupFile(t, cgroupDir("pids", podCgroup), "pids.max"); got != "64" {
		t.Errorf("the pod cgroup's pids.max = %q, want podPidsLimit's 64", got)
	}

	// allowedUnsafeSysctls: a pattern's sysctl set in the pod's network
	// namespace; one outside the list refused as the kubelet refuses it.
	tuned := busybox(ns, "tuned", "sleep", "3600")
	tuned.Spec.NodeName = name
	tuned.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.core.somaxconn", Value: "1234"}, {Name: "kernel.msgmax", Value: "9999"}}}
	cluster.CreatePod(t, tuned)
	waitPhase(t, ns, tuned.Name, v1.PodRunning)
	if out := execIn(t, ns, tuned.Name, "c", "cat", "/proc/sys/net/core/somaxconn", "/proc/sys/kernel/msgmax"); strings.Fields(out)[0] != "1234" || strings.Fields(out)[1] != "9999" {
		t.Errorf("the unsafe sysctls in the pod: %q, want 1234 and 9999", out)
	}
	refused := busybox(ns, "refused", "sleep", "3600")
	refused.Spec.NodeName = name
	refused.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.msgmnb", Value: "1"}}}
	cluster.CreatePod(t, refused)
	if p := waitPhase(t, ns, refused.Name, v1.PodFailed); p.Status.Reason != "SysctlForbidden" || p.Status.Message != `Pod was rejected: forbidden sysctl: "kernel.msgmnb" not allowlisted` {
		t.Errorf("a sysctl outside the list: %q %q", p.Status.Reason, p.Status.Message)
	}
}

// protectKernelDefaults checks the kernel's tunables as the kubelet does:
// on a host tuned as the kubelet wants the node starts; otherwise it
// stops, naming each tunable with the kubelet's message, and registers
// nothing. It never changes them.
func TestProtectKernelDefaults(t *testing.T) {
	skipIfNoCluster(t)
	want := map[string]int{"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10, "kernel/panic_on_oops": 1,
		"kernel/keys/root_maxkeys": 1000000, "kernel/keys/root_maxbytes": 25000000}
	read := func() map[string]int {
		got := map[string]int{}
		for k := range want {
			b, err := os.ReadFile(filepath.Join("/proc/sys", k))
			if err != nil {
				t.Fatal(err)
			}
			got[k], _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return got
	}
	before := read()
	var off []string
	for k, v := range want {
		if before[k] != v {
			off = append(off, fmt.Sprintf("invalid kernel flag: %s, expected value: %d, actual value: %d", k, v, before[k]))
		}
	}
	h := extraNode(t, harness.HostletOptions{NodeName: "hostlet-protect-kernel", NoWaitReady: len(off) > 0,
		KubeletConfig: kcHeader + "protectKernelDefaults: true\n"})
	if len(off) == 0 {
		t.Log("this host is tuned as the kubelet wants: the node started")
		return
	}
	select {
	case <-h.Done():
	case <-ctxT(t).Done():
		t.Fatal("hostlet did not stop on a host whose tunables differ")
	}
	b, err := os.ReadFile(h.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range off {
		if !strings.Contains(string(b), w) {
			t.Errorf("the log does not say %q", w)
		}
	}
	for k, v := range read() {
		if v != before[k] {
			t.Errorf("%s changed from %d to %d", k, before[k], v)
		}
	}
}

// readOnlyPort serves what the kubelet's read-only port serves, over plain
// HTTP without authentication: health, the node's pods, stats and metrics;
// what reads a container's output or runs in it answers 405, as the
// kubelet's, and the configuration is not there.
func TestReadOnlyPort(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-read-only"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + fmt.Sprintf("readOnlyPort: %d\n", port)})
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "listed", "sleep", "3600")
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/healthz", "ok", http.StatusOK},
		{"/pods", `"name":"listed"`, http.StatusOK},
		{"/stats/summary", `"nodeName":"` + name + `"`, http.StatusOK},
		{"/metrics/resource", "node_cpu_usage_seconds_total", http.StatusOK},
		{"/metrics/cadvisor", "machine_memory_bytes", http.StatusOK},
		{"/exec/" + ns + "/listed/c?command=id", "Debug endpoints are disabled.", http.StatusMethodNotAllowed},
		{"/containerLogs/" + ns + "/listed/c", "Debug endpoints are disabled.", http.StatusMethodNotAllowed},
		{"/logs/", "Debug endpoints are disabled.", http.StatusMethodNotAllowed},
		{"/configz", "", http.StatusNotFound},
	} {
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %.200q, want %d with %q", tc.path, code, body, tc.code, tc.want)
		}
	}
}

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"github.com/opencontainers/cgroups"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

const kcHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// A node run from a KubeletConfiguration and --config-dir drop-ins, as a
// kubelet: the drop-ins merge over the file in lexical order (a map key
// by key), a file not ending in .conf is not read, a flag wins over both;
// the Node shows the result, and /configz, through the API server's node
// proxy, serves it as the kubelet's. The node is in a network namespace of
// its own: the node proxy refuses a loopback node address.
func TestKubeletConfigFileAndDropins(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	h, err := c.StartHostlet(ctx, harness.HostletOptions{
		Binary:   hostletBinary(t),
		NodeName: name,
		KubeletConfig: kcHeader + `maxPods: 50
systemReserved:
  cpu: 100m
kubeAPIBurst: 120
containerLogMaxSize: 5Mi
featureGates:
  ContainerStopSignals: true
`,
		KubeletConfigDropins: map[string]string{
			"10-reserved.conf": kcHeader + "maxPods: 40\nsystemReserved:\n  memory: 64Mi\n",
			"20-pods.conf":     kcHeader + "maxPods: 30\n",
			"30-ignored.yaml":  kcHeader + "maxPods: 1\n",
		},
		ExtraArgs: []string{"--kube-api-burst", "150"},
	})
	if err != nil {
		t.Fatal(err)
	}

	n, err := c.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pods := n.Status.Capacity[v1.ResourcePods]; pods.Value() != 30 {
		t.Errorf("pod capacity %v, want 30 (the last drop-in's maxPods)", pods.String())
	}
	// Both drop-ins' reservations: the file's cpu and the first drop-in's
	// memory.
	cpu, mem := n.Status.Capacity.Cpu().DeepCopy(), n.Status.Capacity.Memory().DeepCopy()
	cpu.Sub(resource.MustParse("100m"))
	mem.Sub(resource.MustParse("64Mi"))
	if a := n.Status.Allocatable; a.Cpu().Cmp(cpu) != 0 || a.Memory().Cmp(mem) > 0 {
		t.Errorf("allocatable cpu %v memory %v; capacity less the reservations is %v, %v", a.Cpu(), a.Memory(), &cpu, &mem)
	}

	body, err := c.Client().CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", name, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		t.Fatalf("configz through the node proxy: %v %s", err, body)
	}
	var configz struct {
		KubeletConfig *kubeletv1beta1.KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(body, &configz); err != nil || configz.KubeletConfig == nil {
		t.Fatalf("configz %v: %s", err, body)
	}
	kc := configz.KubeletConfig
	if kc.MaxPods != 30 || kc.SystemReserved["cpu"] != "100m" || kc.SystemReserved["memory"] != "64Mi" ||
		kc.KubeAPIBurst != 150 || kc.ContainerLogMaxSize != "5Mi" || !kc.FeatureGates["ContainerStopSignals"] {
		t.Errorf("configz: maxPods %d, systemReserved %v, kubeAPIBurst %d, containerLogMaxSize %q, featureGates %v\n%s",
			kc.MaxPods, kc.SystemReserved, kc.KubeAPIBurst, kc.ContainerLogMaxSize, kc.FeatureGates, body)
	}
	// The harness's flags and the kubelet's defaults are there too; the
	// cgroup driver is the one in use.
	if int(kc.Port) != h.Port() || kc.ImageGCHighThresholdPercent == nil || *kc.ImageGCHighThresholdPercent != 100 ||
		kc.NodeStatusReportFrequency.Duration.String() != "5m0s" || kc.CgroupDriver == "" || kc.Kind != "" {
		t.Errorf("configz: port %d (want %d), imageGCHighThresholdPercent %v, nodeStatusReportFrequency %v, cgroupDriver %q, kind %q",
			kc.Port, h.Port(), kc.ImageGCHighThresholdPercent, kc.NodeStatusReportFrequency, kc.CgroupDriver, kc.Kind)
	}
}

// A field hostlet does not implement stops it at start, named with its
// value, all such fields at once; the node never registers.
func TestKubeletConfigRefusesUnimplemented(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-refused"
	h := extraNode(t, harness.HostletOptions{
		NodeName:             name,
		NoWaitReady:          true,
		KubeletConfig:        kcHeader + "cpuManagerPolicy: static\nmaxPods: 20\n",
		KubeletConfigDropins: map[string]string{"10-topology.conf": kcHeader + "topologyManagerPolicy: best-effort\n"},
	})
	select {
	case <-h.Done():
	case <-ctxT(t).Done():
		t.Fatal("hostlet did not exit")
	}
	b, err := os.ReadFile(h.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for _, want := range []string{"does not implement", `cpuManagerPolicy: "static"`, `topologyManagerPolicy: "best-effort"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if _, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{}); err == nil {
		t.Error("the node registered")
	}
}

// The node's own fields of a KubeletConfiguration: providerID on the
// registered Node, podsPerCore capping the pod capacity below maxPods, and
// the Lease's nodeLeaseDurationSeconds, renewed every quarter of it.
func TestKubeletConfigNodeFields(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-node"
	const providerID = "hostlet-e2e:///zone-a/" + name
	extraNode(t, harness.HostletOptions{
		NodeName: name,
		KubeletConfig: kcHeader + `maxPods: 50
podsPerCore: 1
providerID: ` + providerID + `
nodeLeaseDurationSeconds: 8
`,
	})
	ctx := ctxT(t)
	n, err := cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != providerID {
		t.Errorf("spec.providerID %q, want %q", n.Spec.ProviderID, providerID)
	}
	// One pod per CPU: the CPUs are fewer than maxPods on any test host.
	cpus := n.Status.Capacity.Cpu().Value()
	if pods := n.Status.Capacity[v1.ResourcePods]; pods.Value() != min(cpus, 50) {
		t.Errorf("pod capacity %v with %d CPUs and podsPerCore 1, want %d", pods.String(), cpus, min(cpus, 50))
	}
	// The Lease is made once the Node is (as the kubelet's controller
	// makes it on its own schedule): a Ready node may not have it yet.
	leases := cluster.Client().CoordinationV1().Leases(v1.NamespaceNodeLease)
	var l *coordinationv1.Lease
	pollUntil(t, 30*time.Second, "the node's Lease", func() bool {
		l, err = leases.Get(ctx, name, metav1.GetOptions{})
		return err == nil
	})
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 8 {
		t.Errorf("leaseDurationSeconds %v, want 8", l.Spec.LeaseDurationSeconds)
	}
	// Renewed every 2 s (a quarter of 8 s, 4% jitter): twice in 6 s at least.
	renewals, last := 0, l.Spec.RenewTime.Time
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := l.Spec.RenewTime.Time; r.After(last) {
			renewals, last = renewals+1, r
		}
	}
	if renewals < 2 {
		t.Errorf("%d Lease renewals in 6 s with nodeLeaseDurationSeconds 8, want 2 or more", renewals)
	}
}

// registerNode: false: the node does not create its Node; once someone else
// has, it writes the status (Ready, its capacity) and renews the Lease, as
// the kubelet does; the creator's labels and taints stay.
func TestKubeletConfigRegisterNodeFalse(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-unregistered"
	h := extraNode(t, harness.HostletOptions{
		NodeName:      name,
		NoWaitReady:   true,
		KubeletConfig: kcHeader + "registerNode: false\nmaxPods: 33\n",
	})
	ctx := ctxT(t)
	// It has tried, and found no Node.
	for {
		b, _ := os.ReadFile(h.LogPath())
		if strings.Contains(string(b), "registerNode is false") {
			break
		}
		select {
		case <-h.Done():
			t.Fatalf("hostlet exited:\n%s", b)
		case <-ctx.Done():
			t.Fatalf("hostlet never said it waits for its Node:\n%s", b)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Fatal("the node registered itself")
	}
	created, err := cluster.Client().CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"created-by": "e2e"}},
		Spec:       v1.NodeSpec{ProviderID: "creator:///" + name, Taints: []v1.Taint{{Key: "e2e", Effect: v1.TaintEffectPreferNoSchedule}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n *v1.Node
	for {
		if n, err = cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if c := nodeCondition(n, v1.NodeReady); c != nil && c.Status == v1.ConditionTrue {
			break
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(h.LogPath())
			t.Fatalf("the Node never became Ready: %+v\n%s", n.Status, b)
		case <-time.After(500 * time.Millisecond):
		}
	}
	if n.UID != created.UID {
		t.Errorf("the Node was replaced: UID %s, created %s", n.UID, created.UID)
	}
	if pods := n.Status.Capacity[v1.ResourcePods]; pods.Value() != 33 {
		t.Errorf("pod capacity %v, want 33", pods.String())
	}
	if n.Labels["created-by"] != "e2e" || n.Spec.ProviderID != "creator:///"+name || len(n.Spec.Taints) != 1 {
		t.Errorf("the creator's labels %v, providerID %q, taints %v changed", n.Labels, n.Spec.ProviderID, n.Spec.Taints)
	}
	l, err := cluster.Client().CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no Lease: %v", err)
	}
	if got := fmt.Sprint(*l.Spec.HolderIdentity, " ", *l.Spec.LeaseDurationSeconds); got != name+" 40" {
		t.Errorf("Lease %s", got)
	}
}

// The kubelet API's insecure settings, taken as the kubelet takes them
// (with a warning): anonymous requests authenticated and AlwaysAllow
// authorizing them, so /pods answers a caller with no certificate; and
// enableDebuggingHandlers: false, under which container logs, exec and the
// node's logs answer 405 and /configz is not served.
func TestKubeletConfigInsecureAPI(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-insecure"
	h := extraNode(t, harness.HostletOptions{
		NodeName: name,
		KubeletConfig: kcHeader + `authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
enableDebuggingHandlers: false
`,
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("https://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(h.Port())) + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/pods"); code != http.StatusOK || !strings.Contains(body, `"kind":"PodList"`) {
		t.Errorf("/pods, anonymous under AlwaysAllow: %d %.200s", code, body)
	}
	for _, p := range []string{"/containerLogs/default/p/c", "/exec/default/p/c", "/logs/", "/runningpods/"} {
		if code, body := get(p); code != http.StatusMethodNotAllowed || body != "Debug endpoints are disabled.\n" {
			t.Errorf("%s without debugging handlers: %d %q, want 405 'Debug endpoints are disabled.'", p, code, body)
		}
	}
	if code, _ := get("/configz"); code != http.StatusNotFound {
		t.Errorf("/configz without debugging handlers: %d, want 404", code)
	}
	b, err := os.ReadFile(h.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "authorization.mode: AlwaysAllow with anonymous authentication): insecure") {
		t.Errorf("no warning that the kubelet API is insecure in the log")
	}
}

// cpuCFSQuota and cpuCFSQuotaPeriod as the kubelet's: a Guaranteed pod's
// 500m limit is no quota in its container's cgroup and an unlimited one in
// its pod's with cpuCFSQuota false; with a 10ms period (and its gate) both
// are 5ms over 10ms.
func TestKubeletConfigCFSQuota(t *testing.T) {
	skipIfNoCluster(t)
	v2 := cgroups.IsCgroup2UnifiedMode()
	// quota and period of a cgroup, as cgroup v1 says them ("-1" none).
	cfs := func(dir string) string {
		if v2 {
			return strings.Replace(readCgroupFile(t, cgroupDir("", dir), "cpu.max"), "max", "-1", 1)
		}
		return readCgroupFile(t, cgroupDir("cpu", dir), "cpu.cfs_quota_us") + " " + readCgroupFile(t, cgroupDir("cpu", dir), "cpu.cfs_period_us")
	}
	for _, tc := range []struct {
		name, config   string
		pod, container string
	}{
		{"hostlet-cfs-off", "cpuCFSQuota: false\n", "-1 100000", "-1 100000"},
		{"hostlet-cfs-10ms", "cpuCFSQuotaPeriod: 10ms\nfeatureGates:\n  CustomCPUCFSQuotaPeriod: true\n", "5000 10000", "5000 10000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := extraNode(t, harness.HostletOptions{NodeName: tc.name, KubeletConfig: kcHeader + tc.config})
			ns := cluster.NewNamespace(t)
			pod := busybox(ns, "limited", "sleep", "3600")
			pod.Spec.NodeName = tc.name
			lim := v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")}
			pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: lim, Limits: lim}
			cluster.CreatePod(t, pod)
			p := waitPhase(t, ns, pod.Name, v1.PodRunning)
			podCgroup := filepath.Join(h.CgroupRoot(), "kubepods", "pod"+string(p.UID))
			id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
			if got := cfs(podCgroup); got != tc.pod {
				t.Errorf("pod cgroup quota and period %q, want %q", got, tc.pod)
			}
			if got := cfs(filepath.Join(podCgroup, id)); got != tc.container {
				t.Errorf("container cgroup quota and period %q, want %q", got, tc.container)
			}
		})
	}
}

// The kubelet's image puller: with registryPullQPS 1 and registryBurst 1,
// of three pods pulling at once (one at a time, serializeImagePulls) the
// pulls right after the first fail "pull QPS exceeded" (ErrImagePull)
// without reaching the registry, and go through after the back-off.
func TestKubeletConfigRegistryQPS(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-pulls"
	extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + "registryPullQPS: 1\nregistryBurst: 1\n"})
	reg := privateRegistry(t, nil)
	ref, err := reg.Push(ctxT(t), localImage(t, images.BusyboxRef), "qps/busybox:1.0")
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	var names []string
	for i := range 3 {
		pod := imagePod(ns, fmt.Sprintf("pull-%d", i), ref, v1.PullAlways)
		pod.Spec.NodeName = name
		cluster.CreatePod(t, pod)
		names = append(names, pod.Name)
	}
	want := fmt.Sprintf("Failed to pull image %q: pull QPS exceeded", ref)
	ctx := ctxT(t)
	for found := false; !found; {
		evs, err := cluster.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			found = found || (e.Reason == "Failed" && e.Message == want)
		}
		if found {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no event %q: %+v", want, evs.Items)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, n := range names {
		waitPhase(t, ns, n, v1.PodRunning)
	}
}

// logging.format: json: the node's log is JSON lines with the kubelet's
// keys (client libraries' klog lines aside).
func TestKubeletConfigJSONLogs(t *testing.T) {
	skipIfNoCluster(t)
	h := extraNode(t, harness.HostletOptions{NodeName: "hostlet-kubeletconfig-json", KubeletConfig: kcHeader + "logging:\n  format: json\n"})
	b, err := os.ReadFile(h.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) != nil {
			continue
		}
		if line["msg"] == "node registered" && line["ts"] != nil && line["node"] == "hostlet-kubeletconfig-json" {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON line saying the node registered:\n%.3000s", b)
	}
}

// realConfig is a file of testdata/kubeletconfigs with its placeholders
// filled in.
func realConfig(t *testing.T, file string, subs map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "kubeletconfigs", file))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for k, v := range subs {
		s = strings.ReplaceAll(s, k, v)
	}
	if strings.Contains(s, "@") && strings.Contains(s, "@\n") {
		t.Fatalf("%s: a placeholder left unfilled", file)
	}
	return s
}

// untunedKernel is what the kubelet's protectKernelDefaults says of this
// host's tunables: nothing on a host tuned as it wants.
func untunedKernel(t *testing.T) []string {
	want := map[string]int{"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10, "kernel/panic_on_oops": 1,
		"kernel/keys/root_maxkeys": 1000000, "kernel/keys/root_maxbytes": 25000000}
	var off []string
	for k, v := range want {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.Atoi(strings.TrimSpace(string(b))); got != v {
			off = append(off, fmt.Sprintf("invalid kernel flag: %s, expected value: %d, actual value: %d", k, v, got))
		}
	}
	return off
}

// refusedWith starts a node expected to stop at start and checks its log
// says each of want; it never registers.
func refusedWith(t *testing.T, opts harness.HostletOptions, want ...string) {
	t.Helper()
	opts.NoWaitReady = true
	h := extraNode(t, opts)
	select {
	case <-h.Done():
	case <-ctxT(t).Done():
		t.Fatal("hostlet did not stop")
	}
	b, err := os.ReadFile(h.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(string(b), w) {
			t.Errorf("%s's log does not say %q:\n%s", opts.NodeName, w, b)
		}
	}
}

// makeCgroup makes cgroup rel in every hierarchy the kubelet validates (on
// cgroup v1 with the parent's CPUs and memory nodes in cpuset, as systemd
// and kubespray's ExecStartPre make them), removed with the cluster's
// cgroups.
func makeCgroup(t *testing.T, rel string) {
	t.Helper()
	if cgroups.IsCgroup2UnifiedMode() {
		dir := filepath.Join("/sys/fs/cgroup", rel)
		for d := filepath.Dir(dir); d != "/sys/fs/cgroup"; d = filepath.Dir(d) {
			defer func(d string) {
				_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0o644)
			}(d)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, ctl := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd"} {
		root := filepath.Join("/sys/fs/cgroup", ctl)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		// Each level of cpuset must have CPUs and memory nodes before a
		// process can join the next.
		p := root
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			parent := p
			p = filepath.Join(p, part)
			if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
			if ctl == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if cur, _ := os.ReadFile(filepath.Join(p, f)); strings.TrimSpace(string(cur)) == "" {
						v, _ := os.ReadFile(filepath.Join(parent, f))
						_ = os.WriteFile(filepath.Join(p, f), v, 0o644)
					}
				}
			}
		}
	}
}

// baitProcess is a sleep in a cgroup of the test's own (rel, the cpu
// controller's, as the kubelet finds the root's processes by it), for
// systemCgroups to take in place of the host's root's processes.
func baitProcess(t *testing.T, rel string) int {
	t.Helper()
	makeCgroup(t, rel)
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(cgroupDir("cpu", rel), "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// processCgroup is pid's cgroup in controller's hierarchy.
func processCgroup(t *testing.T, pid int, controller string) string {
	t.Helper()
	cgs, err := cgroups.ParseCgroupFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if cgroups.IsCgroup2UnifiedMode() {
		return cgs[""]
	}
	return cgs[controller]
}

// inKubeletCgroups checks hostlet moved itself into its kubeletCgroups,
// as the kubelet does once it knows it runs in the host's PID namespace;
// where PID 1's namespace cannot be read (a sandbox's protected init) it
// logs the kubelet's error and stays where it is, as the kubelet would.
func inKubeletCgroups(t *testing.T, h *harness.Hostlet, want string) {
	t.Helper()
	if _, err := os.Readlink("/proc/1/ns/pid"); err != nil {
		pollUntil(t, 10*time.Second, "the kubelet's error that it cannot tell its PID namespace", func() bool {
			b, _ := os.ReadFile(h.LogPath())
			return strings.Contains(string(b), "failed to find pid namespace of init process")
		})
		return
	}
	pollUntil(t, 10*time.Second, "hostlet in kubeletCgroups "+want, func() bool { return processCgroup(t, h.Pid(), "cpu") == want })
}

// tlsHandshake to the kubelet API with at most version max and, if given,
// only those cipher suites.
func tlsHandshake(h *harness.Hostlet, max uint16, suites ...uint16) error {
	addr := net.JoinHostPort(cluster.NodeIP(), fmt.Sprint(h.Port()))
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, MaxVersion: max, CipherSuites: suites})
	if err == nil {
		c.Close()
	}
	return err
}

// runningPod runs a busybox pod on node and returns it.
func runningPod(t *testing.T, node, name string) *v1.Pod {
	t.Helper()
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, name, "sleep", "3600")
	pod.Spec.NodeName = node
	cluster.CreatePod(t, pod)
	return waitPhase(t, ns, pod.Name, v1.PodRunning)
}

// The configurations real installs write run unchanged, their settings in
// effect: kubeadm's /var/lib/kubelet/config.yaml, kubespray's template with
// its defaults and with its hardening settings, and RKE2's drop-in with the
// CIS profile (testdata/kubeletconfigs, each saying where it came from and
// what the test environment substituted). Those setting
// protectKernelDefaults stop on a host whose tunables differ, with the
// kubelet's messages, as the kubelet does; there they run again with a
// drop-in turning it off, as an operator of such a host would.
func TestKubeletConfigRealConfigurations(t *testing.T) {
	skipIfNoCluster(t)
	untuned := untunedKernel(t)
	const noProtect = kcHeader + "protectKernelDefaults: false\n"
	// start runs the node of a configuration that sets
	// protectKernelDefaults: refused on an untuned host first.
	start := func(t *testing.T, opts harness.HostletOptions) *harness.Hostlet {
		t.Helper()
		if len(untuned) > 0 {
			refused := opts
			refused.NodeName += "-untuned"
			refusedWith(t, refused, untuned...)
			dropins := map[string]string{"99-e2e-untuned-host.conf": noProtect}
			for k, v := range opts.KubeletConfigDropins {
				dropins[k] = v
			}
			opts.KubeletConfigDropins = dropins
		}
		return extraNode(t, opts)
	}
	subs := func(t *testing.T, node string) map[string]string {
		return map[string]string{
			"@STATIC_POD_PATH@":     t.TempDir(),
			"@CONTAINERD_ENDPOINT@": "unix://" + cluster.ContainerdSocket(),
			"@CGROUP@":              cluster.CgroupRoot() + "/" + node + ".host",
		}
	}

	t.Run("kubeadm", func(t *testing.T) {
		const name = "hostlet-real-kubeadm"
		s := subs(t, name)
		manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: static
  namespace: default
spec:
  containers:
  - name: c
    image: %s
    command: [sleep, "3600"]
`, images.BusyboxRef)
		if err := os.WriteFile(filepath.Join(s["@STATIC_POD_PATH@"], "static.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		h := extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: realConfig(t, "kubeadm.yaml", s)})
		// staticPodPath: the manifest's mirror pod.
		if _, err := cluster.WaitForPod(ctxT(t), "default", "static-"+name, 2*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
			t.Errorf("the static pod of staticPodPath: %v", err)
		}
		t.Cleanup(func() {
			_ = cluster.Client().CoreV1().Pods("default").Delete(context.Background(), "static-"+name, metav1.DeleteOptions{})
		})
		// clusterDNS and clusterDomain.
		p := runningPod(t, name, "dns")
		if out := execIn(t, p.Namespace, p.Name, "c", "cat", "/etc/resolv.conf"); !strings.Contains(out, "nameserver 10.96.0.10") ||
			!strings.Contains(out, "search "+p.Namespace+".svc.cluster.local svc.cluster.local cluster.local") {
			t.Errorf("resolv.conf under kubeadm's clusterDNS:\n%s", out)
		}
		// anonymous: false: no certificate, no answer.
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := client.Get("https://" + net.JoinHostPort(cluster.NodeIP(), fmt.Sprint(h.Port())) + "/pods")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/pods without a certificate: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("kubespray", func(t *testing.T) {
		const name = "hostlet-real-kubespray"
		s := subs(t, name)
		bait := baitProcess(t, s["@CGROUP@"]+"/root")
		// kubespray's kubelet.env names containerd's unit as the runtime's
		// cgroups (kubelet_runtime_cgroups).
		makeCgroup(t, s["@CGROUP@"]+"/system.slice/containerd.service")
		h := start(t, harness.HostletOptions{NodeName: name, KubeletConfig: realConfig(t, "kubespray.yaml", s),
			ExtraArgs: []string{"--test-system-cgroups-from", s["@CGROUP@"] + "/root", "--runtime-cgroups", s["@CGROUP@"] + "/system.slice/containerd.service"}})
		// kubeletCgroups and systemCgroups.
		inKubeletCgroups(t, h, s["@CGROUP@"]+"/system.slice/kubelet.service")
		pollUntil(t, 10*time.Second, "the bait process in systemCgroups", func() bool {
			return processCgroup(t, bait, "cpu") == s["@CGROUP@"]+"/system.slice"
		})
		// Both reservations, pids included, off kubepods (enforceNodeAllocatable: pods).
		n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cpu := n.Status.Capacity.Cpu().DeepCopy()
		cpu.Sub(resource.MustParse("600m"))
		if a := n.Status.Allocatable.Cpu(); a.Cmp(cpu) != 0 {
			t.Errorf("allocatable cpu %v, want capacity less 600m (%v)", a, &cpu)
		}
		maxPIDs := runtime.MaxPIDs("/proc/sys")
		if got := readCgroupFile(t, cgroupDir("pids", filepath.Join(h.CgroupRoot(), "kubepods")), "pids.max"); got != strconv.FormatInt(maxPIDs-2000, 10) {
			t.Errorf("kubepods pids.max %s, want the task limit %d less 2000 reserved", got, maxPIDs)
		}
		p := runningPod(t, name, "dns")
		if out := execIn(t, p.Namespace, p.Name, "c", "cat", "/etc/resolv.conf"); !strings.Contains(out, "nameserver 169.254.25.10") {
			t.Errorf("resolv.conf under nodelocaldns's clusterDNS:\n%s", out)
		}
		// The summary's system containers: systemCgroups as misc,
		// --runtime-cgroups as runtime, the pods' cgroup (kubelet only where
		// hostlet could move itself), each with its swap.
		_, token := kubeletIdentity(t, p.Namespace, "stats", "get")
		code, body := kubeletCallAt(t, h.Port(), "GET", "/stats/summary", token, 8<<20)
		var sum statsv1alpha1.Summary
		if err := json.Unmarshal([]byte(body), &sum); code != http.StatusOK || err != nil {
			t.Fatalf("/stats/summary: %d %v", code, err)
		}
		got := map[string]bool{}
		for _, c := range sum.Node.SystemContainers {
			got[c.Name] = c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil && c.Memory != nil && c.Memory.WorkingSetBytes != nil &&
				c.Swap != nil && c.Swap.SwapUsageBytes != nil
		}
		if !got["misc"] || !got["pods"] || !got["runtime"] {
			t.Errorf("system containers with CPU, memory and swap %v, want misc, runtime and pods", got)
		}
	})

	t.Run("kubespray-hardened", func(t *testing.T) {
		const name = "hostlet-real-kubespray-hardened"
		s := subs(t, name)
		baitProcess(t, s["@CGROUP@"]+"/root")
		opts := harness.HostletOptions{NodeName: name, KubeletConfig: realConfig(t, "kubespray-hardened.yaml", s),
			ExtraArgs: []string{"--test-system-cgroups-from", s["@CGROUP@"] + "/root"}}
		// The reserved cgroups are not made by the kubelet: without them it
		// stops (system-reserved is enforced first).
		missing := opts
		missing.NodeName += "-nocgroups"
		missing.KubeletConfigDropins = map[string]string{"99-e2e-untuned-host.conf": noProtect}
		refusedWith(t, missing, fmt.Sprintf(`Failed to enforce System Reserved Cgroup Limits on \"%s/system.slice\": cgroup `, s["@CGROUP@"]))
		makeCgroup(t, s["@CGROUP@"]+"/system.slice")
		makeCgroup(t, s["@CGROUP@"]+"/kube.slice")
		h := start(t, opts)
		for _, c := range []struct{ cgroup, shares, memory, pids string }{
			{"system.slice", "512", "536870912", "1000"},
			{"kube.slice", "102", "268435456", "1000"},
		} {
			dir := s["@CGROUP@"] + "/" + c.cgroup
			if cgroups.IsCgroup2UnifiedMode() {
				got := readCgroupFile(t, cgroupDir("", dir), "memory.max") + " " + readCgroupFile(t, cgroupDir("", dir), "pids.max")
				if got != c.memory+" "+c.pids {
					t.Errorf("%s: memory.max and pids.max %q", c.cgroup, got)
				}
				continue
			}
			got := readCgroupFile(t, cgroupDir("cpu", dir), "cpu.shares") + " " + readCgroupFile(t, cgroupDir("memory", dir), "memory.limit_in_bytes") +
				" " + readCgroupFile(t, cgroupDir("pids", dir), "pids.max")
			if want := c.shares + " " + c.memory + " " + c.pids; got != want {
				t.Errorf("%s: cpu.shares, memory limit, pids.max %q, want %q", c.cgroup, got, want)
			}
		}
		// tlsMinVersion VersionTLS12 and tlsCipherSuites.
		if err := tlsHandshake(h, tls.VersionTLS11); err == nil {
			t.Error("a TLS 1.1 handshake succeeded under tlsMinVersion VersionTLS12")
		}
		if err := tlsHandshake(h, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384); err == nil {
			t.Error("TLS 1.2 with a cipher suite outside tlsCipherSuites succeeded")
		}
		if err := tlsHandshake(h, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); err != nil {
			t.Errorf("TLS 1.2 with a listed cipher suite: %v", err)
		}
		// seccompDefault: RuntimeDefault (a filter) for a pod naming none.
		p := runningPod(t, name, "plain")
		if out := execIn(t, p.Namespace, p.Name, "c", "grep", "^Seccomp:", "/proc/self/status"); strings.Fields(out)[1] != "2" {
			t.Errorf("seccomp under seccompDefault: %q, want mode 2", out)
		}
	})

	t.Run("rke2-cis", func(t *testing.T) {
		const name = "hostlet-real-rke2-cis"
		s := subs(t, name)
		h := start(t, harness.HostletOptions{NodeName: name, KubeletConfigDropins: map[string]string{
			"00-rke2-defaults.conf": realConfig(t, "rke2-defaults.conf", s),
			"50-cis.conf":           realConfig(t, "rke2-cis.conf", s),
		}})
		inKubeletCgroups(t, h, s["@CGROUP@"]+"/rke2")
		p := runningPod(t, name, "limited")
		podCgroup := filepath.Join(h.CgroupRoot(), "kubepods", "besteffort", "pod"+string(p.UID))
		if got := readCgroupFile(t, cgroupDir("pids", podCgroup), "pids.max"); got != "4096" {
			t.Errorf("the pod cgroup's pids.max %s, want podPidsLimit's 4096", got)
		}
		if err := tlsHandshake(h, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA); err == nil {
			t.Error("TLS 1.2 with a CBC cipher suite outside tlsCipherSuites succeeded")
		}
	})
}

// localStorageCapacityIsolation: false, as the kubelet's: the Node reports
// no ephemeral-storage, a pod over its emptyDir sizeLimit is not evicted
// (the pods' disk measured every second, eviction checked every second),
// and one requesting ephemeral-storage does not fit.
func TestKubeletConfigNoLocalStorageIsolation(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-nolocalstorage"
	extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + "localStorageCapacityIsolation: false\nvolumeStatsAggPeriod: 1s\n",
		ExtraArgs: []string{"--eviction-monitoring-interval", "1s"}})
	ctx := ctxT(t)
	n, err := cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := n.Status.Capacity[v1.ResourceEphemeralStorage]; ok {
		t.Errorf("capacity ephemeral-storage %v", q.String())
	}
	if q, ok := n.Status.Allocatable[v1.ResourceEphemeralStorage]; ok {
		t.Errorf("allocatable ephemeral-storage %v", q.String())
	}
	ns := cluster.NewNamespace(t)
	limit := resource.MustParse("1Mi")
	over := busybox(ns, "over", "sh", "-c", "dd if=/dev/zero of=/scratch/f bs=1M count=4; echo written; sleep 3600")
	over.Spec.NodeName = name
	over.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
	over.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	cluster.CreatePod(t, over)
	waitPhase(t, ns, over.Name, v1.PodRunning)
	pollUntil(t, 30*time.Second, "the pod's write", func() bool {
		out, _ := cluster.Kubectl(ctx, "-n", ns, "logs", over.Name)
		return strings.Contains(out, "written")
	})
	// Several measurements and eviction rounds later it still runs.
	time.Sleep(5 * time.Second)
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, over.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodRunning {
		t.Errorf("the pod over its sizeLimit: %v %s %q", err, p.Status.Phase, p.Status.Message)
	}
	wants := busybox(ns, "wants", "true")
	wants.Spec.NodeName = name
	wants.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Mi")}
	cluster.CreatePod(t, wants)
	if p := waitPhase(t, ns, wants.Name, v1.PodFailed); p.Status.Reason != "OutOfephemeral-storage" {
		t.Errorf("a pod requesting ephemeral-storage: %q %q", p.Status.Reason, p.Status.Message)
	}
}

// userNamespaces.idsPerPod: a pod with hostUsers: false gets that many
// IDs, aligned to them, above the host's own; a length that does not cut
// the node's range into whole blocks stops the node with the kubelet's
// message.
func TestKubeletConfigUserNamespacesIDsPerPod(t *testing.T) {
	skipIfNoCluster(t)
	refusedWith(t, harness.HostletOptions{NodeName: "hostlet-kubeletconfig-userns-refused",
		KubeletConfig: kcHeader + "userNamespaces:\n  idsPerPod: 196608\n"},
		"create user namespace manager: kubelet user assigned IDs length 4294770688 is not a multiple of 196608")
	const name = "hostlet-kubeletconfig-userns"
	extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + "userNamespaces:\n  idsPerPod: 131072\n"})
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "userns", "sleep", "3600")
	pod.Spec.NodeName = name
	pod.Spec.HostUsers = ptrTo(false)
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	f := strings.Fields(execIn(t, ns, pod.Name, "c", "cat", "/proc/self/uid_map"))
	if len(f) != 3 || f[0] != "0" || f[2] != "131072" {
		t.Fatalf("uid_map %q, want 0 <host id> 131072", f)
	}
	if host, _ := strconv.ParseUint(f[1], 10, 32); host < 131072 || host%131072 != 0 {
		t.Errorf("host ID %d: want a multiple of 131072 above the host's own", host)
	}
}

// enableServer: false, as the kubelet's: the node runs and is Ready, its
// kubelet API port does not answer, its healthz port does.
func TestKubeletConfigEnableServerFalse(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-noserver"
	h := extraNode(t, harness.HostletOptions{NodeName: name, KubeletConfig: kcHeader + "enableServer: false\n"})
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(cluster.NodeIP(), fmt.Sprint(h.Port())), 2*time.Second); err == nil {
		c.Close()
		t.Error("the kubelet API port answers under enableServer: false")
	}
	resp, err := http.Get(h.HealthzURL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "runs", "true")
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodSucceeded)
}

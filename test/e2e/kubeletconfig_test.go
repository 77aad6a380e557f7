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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"github.com/opencontainers/cgroups"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
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
		KubeletConfigDropins: map[string]string{"10-attach.conf": kcHeader + "enableControllerAttachDetach: false\n"},
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
	for _, want := range []string{"does not implement", `cpuManagerPolicy: "static"`, "enableControllerAttachDetach: false"} {
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

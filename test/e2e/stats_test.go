package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

const filled = 64 << 20

// The kubelet API's stats and metrics, read straight from the kubelet port
// as metrics-server does: a container that fills 64 MiB of a memory-backed
// emptyDir shows at least that working set in /stats/summary and in
// /metrics/resource, the node's figures are there, /metrics has hostlet's
// own, and each path wants its own nodes/ subresource.
func TestKubeletStatsAndMetrics(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "fill", "sh", "-c", "head -c 67108864 /dev/zero > /mem/fill && touch /mem/done && exec sleep 3600")
	pod.Spec.NodeName = nodeName
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	pod.Spec.Volumes = []v1.Volume{{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "mem", MountPath: "/mem"}}
	// A memory limit makes the pod's (its cgroup's), and so its
	// availableBytes.
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("200Mi")}
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1,
	}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "fill", v1.PodRunning)
	execIn(t, ns, "fill", "c", "sh", "-c", "while [ ! -e /mem/done ]; do sleep 0.2; done")

	_, statsToken := kubeletIdentity(t, ns, "stats", "get")
	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")

	// Two reads: the second has CPU rates from the first's samples.
	summary(t, statsToken)
	sum := summary(t, statsToken)
	n := sum.Node
	if n.NodeName != nodeName || n.CPU == nil || n.CPU.UsageCoreNanoSeconds == nil || *n.CPU.UsageCoreNanoSeconds == 0 || n.CPU.UsageNanoCores == nil {
		t.Errorf("node CPU: %s", js(n.CPU))
	}
	if n.Memory == nil || n.Memory.WorkingSetBytes == nil || *n.Memory.WorkingSetBytes == 0 || n.Memory.AvailableBytes == nil || *n.Memory.AvailableBytes == 0 {
		t.Errorf("node memory: %s", js(n.Memory))
	}
	if n.Fs == nil || n.Fs.CapacityBytes == nil || *n.Fs.CapacityBytes == 0 || n.Runtime == nil || n.Runtime.ImageFs == nil || n.Rlimit == nil || n.Rlimit.MaxPID == nil {
		t.Errorf("node filesystems and rlimit: fs %s runtime %s rlimit %s", js(n.Fs), js(n.Runtime), js(n.Rlimit))
	}
	if n.Network == nil || len(n.Network.Interfaces) == 0 {
		t.Errorf("node network: %s", js(n.Network))
	}
	// The container filesystem is the image filesystem, as the kubelet's
	// CRI stats provider has it (not split).
	if r := n.Runtime; r == nil || r.ImageFs == nil || r.ContainerFs == nil || r.ContainerFs.CapacityBytes == nil || r.ImageFs.CapacityBytes == nil ||
		*r.ContainerFs.CapacityBytes != *r.ImageFs.CapacityBytes || r.ContainerFs.Inodes == nil || r.ContainerFs.InodesFree == nil {
		t.Errorf("node runtime filesystems: %s", js(n.Runtime))
	}
	// Swap as cAdvisor reads it for the kubelet: the root cgroup's, the
	// system containers'.
	// The root's swap limit is the host's swap.
	if n.Swap == nil || n.Swap.SwapUsageBytes == nil || n.Swap.SwapAvailableBytes == nil {
		t.Errorf("node swap: %s", js(n.Swap))
	}
	// PSI as the kubelet's (KubeletPSI on by default): the kernel's where
	// it keeps them per cgroup, zeros on cgroup v1; I/O its pressure.
	if n.CPU.PSI == nil || n.Memory.PSI == nil || n.IO == nil || n.IO.PSI == nil {
		t.Errorf("node PSI: cpu %s memory %s io %s", js(n.CPU), js(n.Memory), js(n.IO))
	}
	for _, sc := range n.SystemContainers {
		if sc.Swap == nil || sc.Swap.SwapUsageBytes == nil || sc.CPU == nil || sc.Memory == nil || sc.Memory.WorkingSetBytes == nil ||
			sc.CPU.PSI == nil || sc.Memory.PSI == nil || sc.IO == nil || sc.IO.PSI == nil {
			t.Errorf("system container %s: %s", sc.Name, js(sc))
		}
	}
	var ps *statsv1alpha1.PodStats
	for i := range sum.Pods {
		if sum.Pods[i].PodRef.Namespace == ns && sum.Pods[i].PodRef.Name == "fill" {
			ps = &sum.Pods[i]
		}
	}
	if ps == nil {
		t.Fatalf("pod fill not in the summary: %s", js(sum.Pods))
	}
	if len(ps.Containers) != 1 || ps.Containers[0].Name != "c" {
		t.Fatalf("containers: %s", js(ps.Containers))
	}
	c := ps.Containers[0]
	if ws := c.Memory.WorkingSetBytes; ws == nil || *ws < filled {
		t.Errorf("container working set %s, want ≥ %d", js(c.Memory), filled)
	}
	if ws := ps.Memory.WorkingSetBytes; ws == nil || *ws < filled {
		t.Errorf("pod working set %s, want ≥ %d", js(ps.Memory), filled)
	}
	// The pod's memory from its cgroup, as the kubelet's: its limit (the
	// container's) less its working set, read together.
	if m := ps.Memory; m.AvailableBytes == nil || m.WorkingSetBytes == nil || *m.AvailableBytes+*m.WorkingSetBytes != 200<<20 {
		t.Errorf("pod memory %s, want availableBytes + workingSetBytes = %d", js(m), 200<<20)
	}
	if c.Memory.AvailableBytes == nil || *c.Memory.AvailableBytes > 200<<20-filled {
		t.Errorf("container memory %s, want availableBytes ≤ %d", js(c.Memory), 200<<20-filled)
	}
	if ps.CPU == nil || ps.CPU.UsageCoreNanoSeconds == nil || *ps.CPU.UsageCoreNanoSeconds == 0 || ps.CPU.UsageNanoCores == nil {
		t.Errorf("pod CPU %s", js(ps.CPU))
	}
	// The pod's processes: its containers' (sleep, and a probe's now and then).
	if ps.ProcessStats == nil || ps.ProcessStats.ProcessCount == nil || *ps.ProcessStats.ProcessCount < 1 {
		t.Errorf("pod process stats %s", js(ps.ProcessStats))
	}
	if ps.Swap == nil || ps.Swap.SwapUsageBytes == nil || c.Swap == nil || c.Swap.SwapUsageBytes == nil {
		t.Errorf("pod swap %s container swap %s", js(ps.Swap), js(c.Swap))
	}
	if ps.CPU.PSI == nil || ps.Memory.PSI == nil || ps.IO == nil || ps.IO.PSI == nil || c.CPU.PSI == nil || c.Memory.PSI == nil || c.IO == nil || c.IO.PSI == nil {
		t.Errorf("PSI: pod %s %s %s container %s %s %s", js(ps.CPU), js(ps.Memory), js(ps.IO), js(c.CPU), js(c.Memory), js(c.IO))
	}
	if c.CPU.UsageCoreNanoSeconds == nil || *c.CPU.UsageCoreNanoSeconds == 0 || c.CPU.UsageNanoCores == nil || c.StartTime.IsZero() {
		t.Errorf("container CPU %s start %v", js(c.CPU), c.StartTime)
	}
	if c.Rootfs == nil || c.Rootfs.UsedBytes == nil || c.Logs == nil || c.Logs.UsedBytes == nil {
		t.Errorf("container rootfs %s logs %s", js(c.Rootfs), js(c.Logs))
	}
	if ps.Network == nil || len(ps.Network.Interfaces) == 0 || ps.EphemeralStorage == nil {
		t.Errorf("pod network %s ephemeral storage %s", js(ps.Network), js(ps.EphemeralStorage))
	}
	var mem *statsv1alpha1.VolumeStats
	for i := range ps.VolumeStats {
		if ps.VolumeStats[i].Name == "mem" {
			mem = &ps.VolumeStats[i]
		}
	}
	if mem == nil || mem.UsedBytes == nil || *mem.UsedBytes < filled {
		t.Errorf("volume stats: %s", js(ps.VolumeStats))
	}

	res := scrape(t, "/metrics/resource", metricsToken)
	podLabels := map[string]string{"pod": "fill", "namespace": ns}
	containerLabels := map[string]string{"container": "c", "pod": "fill", "namespace": ns}
	for _, m := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"container_memory_working_set_bytes", containerLabels, filled},
		{"pod_memory_working_set_bytes", podLabels, filled},
		{"container_cpu_usage_seconds_total", containerLabels, 1e-9},
		{"pod_cpu_usage_seconds_total", podLabels, 1e-9},
		{"container_start_time_seconds", containerLabels, float64(time.Now().Add(-time.Hour).Unix())},
		{"node_cpu_usage_seconds_total", nil, 1e-9},
		{"node_memory_working_set_bytes", nil, 1},
	} {
		v, ok := sample(res, m.name, m.labels)
		if !ok || v < m.min {
			t.Errorf("%s%v = %v (found %v), want ≥ %v", m.name, m.labels, v, ok, m.min)
		}
	}
	if v, ok := sample(res, "resource_scrape_error", nil); !ok || v != 0 {
		t.Errorf("resource_scrape_error = %v (found %v)", v, ok)
	}
	own := scrape(t, "/metrics", metricsToken)
	if v, _ := sample(own, "kubelet_running_pods", nil); v < 1 {
		t.Errorf("kubelet_running_pods = %v", v)
	}
	if v, _ := sample(own, "kubelet_pod_start_duration_seconds", nil); v < 1 {
		t.Errorf("kubelet_pod_start_duration_seconds has %v samples", v)
	}
	if v, _ := sample(own, "kubelet_running_containers", map[string]string{"container_state": "running"}); v < 1 {
		t.Errorf("kubelet_running_containers{running} = %v", v)
	}

	// Every probe run counted, as the kubelet's /metrics/probes.
	probeLabels := map[string]string{"probe_type": "Readiness", "result": "successful", "container": "c", "pod": "fill", "namespace": ns}
	for i := 0; ; i++ {
		if v, _ := sample(scrape(t, "/metrics/probes", metricsToken), "prober_probe_total", probeLabels); v >= 1 {
			break
		}
		if i == 60 {
			t.Fatalf("no prober_probe_total%v in /metrics/probes", probeLabels)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Each path its own subresource.
	for _, c := range []struct{ path, token string }{
		{"/metrics/probes", statsToken},
		{"/stats/summary", metricsToken},
		{"/metrics/resource", statsToken},
		{"/metrics", statsToken},
	} {
		if code, body := kubeletCall(t, "GET", c.path, c.token); code != 403 {
			t.Errorf("%s with the wrong subresource: %d %q, want 403", c.path, code, body)
		}
	}
}

// summary reads /stats/summary.
func summary(t *testing.T, token string) *statsv1alpha1.Summary {
	t.Helper()
	code, body := kubeletCallLimit(t, "GET", "/stats/summary", token, 8<<20)
	if code != 200 {
		t.Fatalf("/stats/summary: %d %q", code, body)
	}
	var s statsv1alpha1.Summary
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/stats/summary: %v: %q", err, body)
	}
	return &s
}

// scrape reads a Prometheus text page of the kubelet API.
func scrape(t *testing.T, path, token string) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeAt(t, node.Port(), path, token)
}

// scrapeAt is scrape of the kubelet API on another port (an extra node's).
func scrapeAt(t *testing.T, port int, path, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := kubeletCallAt(t, port, "GET", path, token, 8<<20)
	if code != 200 {
		t.Fatalf("%s: %d %q", path, code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return fams
}

// sample finds the value of the series of a family with these labels.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		match := 0
		for _, l := range m.Label {
			if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
)

// series are the samples of a family whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		match := 0
		for _, l := range m.Label {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match == len(want) {
			out = append(out, m)
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// The cAdvisor series of a pod that burns CPU under a 200m limit and holds
// 64 MiB, read from the kubelet port with a nodes/metrics token as
// kube-prometheus-stack's kubelet ServiceMonitor scrapes it (the API
// server's node proxy, which the classic cadvisor job uses, refuses this
// node's loopback address: TestCadvisorThroughAPIServerProxy reads it
// there on a node in its own network namespace): the container's series
// carry the kubelet's labels (container, pod, namespace, image, name = the
// container ID, id = its cgroup below the pod's), CPU grows, the CFS
// quota throttles it, the working set holds the 64 MiB, the limits are the
// spec's; the pod cgroup's series have the pod's network, which grows
// with traffic to another pod; machine_* describe the host. Each path of
// the kubelet API is authorized by its own subresource (nodes/metrics).
func TestCadvisorMetrics(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	web := testapp(ns, "web", "--http=:8080")
	web.Spec.NodeName = nodeName
	cluster.CreatePod(t, web)
	pod := burnPod(ns, nodeName)
	cluster.CreatePod(t, pod)
	p := waitPhase(t, ns, "burn", v1.PodRunning)
	execIn(t, ns, "burn", "c", "sh", "-c", "while [ ! -e /mem/done ]; do sleep 0.2; done")
	webIP := waitReady(t, ns, "web").Status.PodIP

	st := p.Status.ContainerStatuses[0]
	id := strings.TrimPrefix(st.ContainerID, "containerd://")
	podCgroup := filepath.Join(node.CgroupRoot(), "kubepods", "burstable", "pod"+string(p.UID))
	ctr := map[string]string{"container": "c", "pod": "burn", "namespace": ns}
	podLevel := map[string]string{"container": "", "pod": "burn", "namespace": ns, "id": podCgroup, "image": "", "name": ""}

	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")
	_, statsToken := kubeletIdentity(t, ns, "stats", "get")
	fams := scrape(t, "/metrics/cadvisor", metricsToken)
	one := func(name string, labels map[string]string) *dto.Metric {
		t.Helper()
		s := series(fams, name, labels)
		if len(s) != 1 {
			t.Fatalf("%s%v: %d series", name, labels, len(s))
		}
		return s[0]
	}
	// The labels, as the kubelet's containerPrometheusLabelsFunc has them.
	m := one("container_cpu_usage_seconds_total", ctr)
	labels := map[string]string{}
	for _, l := range m.Label {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"container": "c", "pod": "burn", "namespace": ns, "cpu": "total",
		"name": id, "image": st.Image, "id": filepath.Join(podCgroup, id)}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("container label %s = %q, want %q (all: %v)", k, labels[k], v, labels)
		}
	}
	if len(labels) != len(want) {
		t.Errorf("container labels %v, want %v", labels, want)
	}
	if m.GetTimestampMs() == 0 {
		t.Error("container_cpu_usage_seconds_total has no timestamp")
	}
	cpu0 := metricValue(m)

	for _, c := range []struct {
		name     string
		labels   map[string]string
		min, max float64
	}{
		{"container_memory_working_set_bytes", ctr, filled, 256 << 20},
		{"container_memory_usage_bytes", ctr, filled, 256 << 20},
		{"container_memory_working_set_bytes", podLevel, filled, 256 << 20},
		{"container_memory_rss", ctr, 1, 256 << 20},
		{"container_memory_cache", ctr, 0, 256 << 20},
		{"container_memory_swap", ctr, 0, 256 << 20},
		{"container_oom_events_total", ctr, 0, 0},
		{"container_spec_memory_limit_bytes", ctr, 256 << 20, 256 << 20},
		{"container_spec_cpu_quota", ctr, 20000, 20000},
		{"container_spec_cpu_period", ctr, 100000, 100000},
		{"container_processes", ctr, 1, 10},
		{"container_threads", ctr, 1, 100},
		{"container_cpu_user_seconds_total", ctr, 0.001, 1e6},
		{"container_cpu_system_seconds_total", ctr, 0, 1e6},
		{"container_fs_usage_bytes", ctr, 0, 1 << 30},
		{"container_start_time_seconds", ctr, float64(time.Now().Add(-time.Hour).Unix()), float64(time.Now().Add(time.Minute).Unix())},
		{"container_last_seen", ctr, float64(time.Now().Add(-time.Hour).Unix()), float64(time.Now().Add(time.Hour).Unix())},
		{"container_cpu_usage_seconds_total", podLevel, 0.001, 1e6},
		{"container_cpu_usage_seconds_total", map[string]string{"id": "/"}, 1, 1e9},
		{"container_memory_working_set_bytes", map[string]string{"id": filepath.Join(node.CgroupRoot(), "kubepods")}, filled, 1 << 50},
	} {
		v := metricValue(one(c.name, c.labels))
		if v < c.min || v > c.max {
			t.Errorf("%s%v = %v, want in [%v, %v]", c.name, c.labels, v, c.min, c.max)
		}
	}
	// v1 has the container's cpu.shares of its 100m request and failcnt;
	// v2 the weight runc mapped the shares to, mapped back by cAdvisor's
	// formula.
	if !cgroups.IsCgroup2UnifiedMode() {
		one("container_memory_failcnt", ctr)
		if v := metricValue(one("container_spec_cpu_shares", ctr)); v != 102 {
			t.Errorf("container_spec_cpu_shares = %v, want 102", v)
		}
	}
	for _, name := range []string{"machine_cpu_cores", "machine_memory_bytes"} {
		if v := metricValue(one(name, nil)); v < 1 {
			t.Errorf("%s = %v", name, v)
		}
	}
	if v := metricValue(one("container_scrape_error", nil)); v != 0 {
		t.Errorf("container_scrape_error = %v", v)
	}
	// No pause container series: every series of the pod is its cgroup's
	// or its container's.
	for _, s := range series(fams, "container_last_seen", map[string]string{"pod": "burn"}) {
		for _, l := range s.Label {
			if l.GetName() == "id" && l.GetValue() != podCgroup && l.GetValue() != filepath.Join(podCgroup, id) {
				t.Errorf("series of cgroup %s for the pod", l.GetValue())
			}
		}
	}

	// Traffic from another pod reaches the pod's eth0, on the pod cgroup's
	// series; the container burns on and is throttled by its quota.
	eth0 := map[string]string{"pod": "burn", "namespace": ns, "container": "", "interface": "eth0"}
	rx0 := metricValue(one("container_network_receive_bytes_total", eth0))
	execIn(t, ns, "burn", "c", "wget", "-qO-", "http://"+webIP+":8080/healthz")
	for i := 0; ; i++ {
		fams = scrape(t, "/metrics/cadvisor", metricsToken)
		rx := metricValue(one("container_network_receive_bytes_total", eth0))
		tx := metricValue(one("container_network_transmit_packets_total", eth0))
		cpu := metricValue(one("container_cpu_usage_seconds_total", ctr))
		throttled := metricValue(one("container_cpu_cfs_throttled_periods_total", ctr))
		periods := metricValue(one("container_cpu_cfs_periods_total", ctr))
		if rx > rx0 && tx > 0 && cpu > cpu0 && throttled > 0 && periods >= throttled {
			break
		}
		if i == 60 {
			t.Fatalf("after traffic and burning: rx %v (before %v) tx packets %v, cpu %v (before %v), throttled %v of %v periods",
				rx, rx0, tx, cpu, cpu0, throttled, periods)
		}
		time.Sleep(time.Second)
	}

	// nodes/metrics reaches it (above), nodes/stats does not.
	if code, body := kubeletCall(t, "GET", "/metrics/cadvisor", statsToken); code != 403 || !strings.Contains(body, "subresource(s)=[metrics]") {
		t.Errorf("/metrics/cadvisor with nodes/stats: %d %q", code, body)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// prometheusBinary builds (once; cached) the Prometheus of
// test/cluster/prometheus and returns its path.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxT(t), filepath.Join(root, "test/cluster/prometheus/build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test/cluster/prometheus/build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// scraperToken is a ServiceAccount token allowed what the classic cadvisor
// job's Prometheus is: get nodes/proxy.
func scraperToken(t *testing.T, c *harness.Cluster, ns string) string {
	t.Helper()
	ctx, cl := ctxT(t), c.Client()
	if _, err := cl.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := ns + "-prometheus"
	if _, err := cl.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cl.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// startPrometheus runs Prometheus scraping node's /metrics/cadvisor every
// second through the API server's node proxy (the classic cadvisor job:
// job="cadvisor", the kubernetes-mixin's default cadvisorSelector) and
// returns the base URL of its API on loopback.
func startPrometheus(t *testing.T, c *harness.Cluster, node, ns string) string {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(scraperToken(t, c, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(c.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: cadvisor
  scheme: https
  metrics_path: /api/v1/nodes/%s/proxy/metrics/cadvisor
  authorization:
    credentials_file: %s
  tls_config:
    ca_file: %s
  static_configs:
  - targets: [%q]
`, node, tokenFile, c.CACertFile(), api.Host)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, prometheusBinary(t), "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	base := "http://" + addr
	for i := 0; ; i++ {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if i == 120 {
			t.Fatal("prometheus never ready")
		}
		time.Sleep(500 * time.Millisecond)
	}
	return base
}

// promSample is one element of an instant query's vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value() float64 {
	v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
	return v
}

// promQuery runs an instant query.
func promQuery(t *testing.T, base, q string) []promSample {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v %s %s", q, err, r.Status, r.Error)
	}
	return r.Data.Result
}

// prometheusQueries has Prometheus scrape node and waits until the queries
// of the standard dashboards and alerts (kubernetes-mixin: its recording
// rules' cAdvisor part, the Compute Resources / Pod and Networking / Pod
// panels, CPUThrottlingHigh) answer for pod burn of ns; traffic is sent
// once Prometheus has the pod's first samples, so the network rates grow.
// KubeContainerOOMKilled reads kube-state-metrics, not cAdvisor: not here.
func prometheusQueries(t *testing.T, c *harness.Cluster, node, ns string, traffic func()) {
	base := startPrometheus(t, c, node, ns)
	sel := fmt.Sprintf(`job="cadvisor", namespace=%q, pod="burn"`, ns)
	type check struct {
		what, query string
		ok          func(float64) bool
	}
	positive := func(v float64) bool { return v > 0 }
	checks := []check{
		{"up", `up{job="cadvisor"}`, func(v float64) bool { return v == 1 }},
		// node_namespace_pod_container:container_cpu_usage_seconds_total:sum_rate5m
		{"cpu rate", `sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{` + sel + `, image!=""}[5m]))`, positive},
		// node_namespace_pod_container:container_memory_working_set_bytes and the
		// Pod dashboard's memory panels.
		{"working set", `sum by (container) (container_memory_working_set_bytes{` + sel + `, container!="", image!=""})`,
			func(v float64) bool { return v >= filled }},
		{"rss", `sum by (container) (container_memory_rss{` + sel + `, container!="", image!=""})`, positive},
		{"cache", `sum by (container) (container_memory_cache{` + sel + `, container!="", image!=""})`, positive},
		{"memory limit", `sum by (container) (container_spec_memory_limit_bytes{` + sel + `, container!="", image!=""})`,
			func(v float64) bool { return v == 256<<20 }},
		// The Pod dashboard's CPU throttling panel and the CPUThrottlingHigh
		// alert's expression (over 25% of periods throttled).
		{"CPUThrottlingHigh", `sum(increase(container_cpu_cfs_throttled_periods_total{container!="", ` + sel + `}[5m])) without (id, metrics_path, name, image, endpoint, job, node)
  / on (cluster, namespace, pod, container, instance) group_left
sum(increase(container_cpu_cfs_periods_total{` + sel + `}[5m])) without (id, metrics_path, name, image, endpoint, job, node)
  > ( 25 / 100 )`, positive},
		// Networking / Pod: received and transmitted bytes and packets.
		{"receive bytes rate", `sum by (pod) (rate(container_network_receive_bytes_total{` + sel + `}[5m]))`, positive},
		{"transmit bytes rate", `sum by (pod) (rate(container_network_transmit_bytes_total{` + sel + `}[5m]))`, positive},
		{"receive packets rate", `sum by (pod) (rate(container_network_receive_packets_total{` + sel + `}[5m]))`, positive},
		{"oom events", `sum by (container) (container_oom_events_total{` + sel + `, container="c"})`, func(v float64) bool { return v == 0 }},
	}
	for i := 0; len(promQuery(t, base, `container_memory_working_set_bytes{`+sel+`}`)) == 0; i++ {
		if i == 60 {
			t.Fatal("prometheus has no series of the pod")
		}
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second) // a second scrape before the traffic
	traffic()
	for i := 0; ; i++ {
		var failing []string
		for _, ch := range checks {
			res := promQuery(t, base, ch.query)
			if len(res) != 1 || !ch.ok(res[0].value()) {
				failing = append(failing, fmt.Sprintf("%s: %v", ch.what, res))
			}
		}
		if len(failing) == 0 {
			for _, ch := range checks {
				t.Logf("prometheus: %s = %v", ch.what, promQuery(t, base, ch.query)[0].value())
			}
			return
		}
		if i == 90 {
			t.Fatalf("queries without the expected answer:\n%s", strings.Join(failing, "\n"))
		}
		time.Sleep(time.Second)
	}
}

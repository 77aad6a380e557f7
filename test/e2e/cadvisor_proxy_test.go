package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// burnPod burns CPU under a 200m limit and holds 64 MiB in a memory-backed
// emptyDir (touching /mem/done once it does).
func burnPod(ns, nodeName string) *v1.Pod {
	pod := busybox(ns, "burn", "sh", "-c", "head -c 67108864 /dev/zero > /mem/fill && touch /mem/done && while :; do :; done")
	pod.Spec.NodeName = nodeName
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	pod.Spec.Volumes = []v1.Volume{{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "mem", MountPath: "/mem"}}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("256Mi")},
	}
	return pod
}

// The classic cadvisor job's path: /metrics/cadvisor through the API
// server's node proxy (kubectl get --raw /api/v1/nodes/<node>/proxy/...),
// on a cluster whose node has an address of its own (the proxy refuses
// loopback ones). The API server reaches the node with its kubelet client
// certificate, which hostlet authorizes as the kubelet does. With
// E2E_PROMETHEUS set (make e2e-prometheus), a real Prometheus then scrapes
// the same path and the standard dashboards' and alerts' queries answer
// for the pod (cadvisor_prometheus_test.go).
func TestCadvisorThroughAPIServerProxy(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-cadvisor"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	importTestImages(t, c)
	h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: name})
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(h.Stop)

	ns := c.NewNamespace(t)
	web := testapp(ns, "web", "--http=:8080")
	web.Spec.NodeName = name
	c.CreatePod(t, web)
	c.CreatePod(t, burnPod(ns, name))
	running := func(p *v1.Pod) (bool, error) { return p.Status.Phase == v1.PodRunning, nil }
	p, err := c.WaitForPod(ctx, ns, "burn", 2*time.Minute, running)
	if err != nil {
		t.Fatalf("burn: %v", err)
	}
	if _, err := c.Kubectl(ctx, "-n", ns, "exec", "burn", "--", "sh", "-c", "while [ ! -e /mem/done ]; do sleep 0.2; done"); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	podCgroup := filepath.Join(h.CgroupRoot(), "kubepods", "burstable", "pod"+string(p.UID))

	out, err := c.Kubectl(ctx, "get", "--raw", "/api/v1/nodes/"+name+"/proxy/metrics/cadvisor")
	if err != nil {
		t.Fatalf("kubectl get --raw .../proxy/metrics/cadvisor: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		t.Fatalf("parsing /metrics/cadvisor: %v", err)
	}
	ctr := map[string]string{"container": "c", "pod": "burn", "namespace": ns, "name": id, "id": filepath.Join(podCgroup, id)}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"container_memory_working_set_bytes", ctr, filled},
		{"container_cpu_usage_seconds_total", ctr, 1e-3},
		{"container_memory_working_set_bytes", map[string]string{"id": podCgroup, "pod": "burn", "container": ""}, filled},
		{"container_network_receive_packets_total", map[string]string{"id": podCgroup, "interface": "eth0"}, 0},
		{"machine_memory_bytes", nil, 1},
	} {
		s := series(fams, c.name, c.labels)
		if len(s) != 1 || metricValue(s[0]) < c.min {
			t.Errorf("%s%v: %d series, want one ≥ %v", c.name, c.labels, len(s), c.min)
		}
	}

	if os.Getenv("E2E_PROMETHEUS") == "" {
		return
	}
	webIP := waitPodIP(t, c, ns, "web")
	prometheusQueries(t, c, name, ns, func() {
		if _, err := c.Kubectl(ctx, "-n", ns, "exec", "burn", "--", "wget", "-qO-", "http://"+webIP+":8080/healthz"); err != nil {
			t.Errorf("traffic: %v", err)
		}
	})
}

func waitPodIP(t *testing.T, c *harness.Cluster, ns, name string) string {
	t.Helper()
	p, err := c.WaitForPod(ctxT(t), ns, name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		return p.Status.PodIP != "" && podReady(p), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p.Status.PodIP
}

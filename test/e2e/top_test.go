package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// metrics-server on a cluster whose node has its own network namespace (so
// the pod reaches the node's kubelet API at its InternalIP and the API
// server reaches the pod through the aggregator): `kubectl top` shows
// hostlet's figures, and a HorizontalPodAutoscaler on CPU scales a
// Deployment out on the hostlet node.
func TestMetricsServer(t *testing.T) {
	skipIfNoCluster(t)
	const node = "hostlet-top"
	c, _ := netnsCluster(t, node)
	deployMetricsServer(t, c)
	ns := c.NewNamespace(t)

	t.Run("top", func(t *testing.T) {
		// The node: its name with CPU and memory figures above zero.
		fields := topRow(t, c, []string{"top", "node", node}, node)
		t.Logf("kubectl top node: %q", fields)
		if len(fields) < 5 || fields[1] == "0m" || strings.HasPrefix(fields[3], "0") {
			t.Errorf("kubectl top node: %q", fields)
		}

		// A pod holding 64 MiB in a memory-backed emptyDir (charged to its
		// cgroup) shows about that much.
		pod := busybox(ns, "fill", "sh", "-c", "head -c 67108864 /dev/zero > /mem/fill && exec sleep 3600")
		pod.Spec.NodeName = node
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		pod.Spec.Volumes = []v1.Volume{{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "mem", MountPath: "/mem"}}
		c.CreatePod(t, pod)
		fields = topRow(t, c, []string{"top", "pod", "-n", ns, "fill"}, "fill", func(f []string) bool {
			return len(f) >= 3 && memMi(f[2]) >= filled>>20
		})
		t.Logf("kubectl top pod: %q", fields)
		if mi := memMi(fields[2]); mi < filled>>20 || mi > filled>>20+32 {
			t.Errorf("kubectl top pod: %q, want about %d Mi", fields, filled>>20)
		}
	})

	t.Run("hpa", func(t *testing.T) {
		// One replica burning its whole CPU limit, three times its request:
		// 50% utilization wants more than the two replicas allowed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		labels := map[string]string{"app": "burn"}
		cpu := func(q string) v1.ResourceList { return v1.ResourceList{v1.ResourceCPU: resource.MustParse(q)} }
		_, err := c.Client().AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "burn", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptrTo(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: v1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: v1.PodSpec{
						TerminationGracePeriodSeconds: ptrTo(int64(1)),
						Containers: []v1.Container{{
							Name: "burn", Image: images.BusyboxRef, Command: []string{"sh", "-c", "while :; do :; done"},
							Resources: v1.ResourceRequirements{Requests: cpu("100m"), Limits: cpu("300m")},
						}},
					},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: "burn", Namespace: ns},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "burn"},
				MinReplicas:    ptrTo(int32(1)),
				MaxReplicas:    2,
				Metrics: []autoscalingv2.MetricSpec{{
					Type: autoscalingv2.ResourceMetricSourceType,
					Resource: &autoscalingv2.ResourceMetricSource{Name: v1.ResourceCPU, Target: autoscalingv2.MetricTarget{
						Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptrTo(int32(50)),
					}},
				}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var last string
		err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			d, err := c.Client().AppsV1().Deployments(ns).Get(ctx, "burn", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = fmt.Sprintf("replicas %d, available %d", d.Status.Replicas, d.Status.AvailableReplicas)
			return d.Status.AvailableReplicas >= 2, nil
		})
		if err != nil {
			hpa, _ := c.Kubectl(ctx, "describe", "hpa", "-n", ns, "burn")
			t.Fatalf("deployment never scaled out (%s): %v\n%s", last, err, hpa)
		}
		t.Logf("deployment scaled out: %s", last)
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=burn"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != node {
				t.Errorf("pod %s on %q, want %s", p.Name, p.Spec.NodeName, node)
			}
		}
	})
}

// deployMetricsServer builds metrics-server (build.sh metrics-server) and
// its image, deploys testdata/metrics-server.yaml and waits until the
// metrics API is served.
func deployMetricsServer(t *testing.T, c *harness.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	u, err := url.Parse(c.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	deployComponent(ctx, t, c, "metrics-server", images.BuildMetricsServer, "testdata/metrics-server.yaml", map[string]string{
		"APISERVER_HOST": host, "APISERVER_PORT": port,
	})
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Available", "apiservice/v1beta1.metrics.k8s.io", "--timeout=3m"); err != nil {
		pods, _ := c.Kubectl(ctx, "get", "pods", "-n", "kube-system", "-o", "wide")
		api, _ := c.Kubectl(ctx, "get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "yaml")
		logs, _ := c.Kubectl(ctx, "logs", "-n", "kube-system", "deployment/metrics-server", "--tail", "40")
		t.Fatalf("metrics API: %v\n%s\n%s\n%s", err, pods, api, logs)
	}
}

// topRow runs kubectl args until their output has a row named name (and ok
// accepts it, if given) and returns that row's fields. metrics-server has
// figures only after two scrapes of the node.
func topRow(t *testing.T, c *harness.Cluster, args []string, name string, ok ...func([]string) bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out string
	var fields []string
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if out, err = c.Kubectl(ctx, append(args, "--no-headers")...); err != nil {
			return false, nil
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				fields = f
				return len(ok) == 0 || ok[0](f), nil
			}
		}
		return false, nil
	})
	if err != nil {
		logs, _ := c.Kubectl(ctx, "logs", "-n", "kube-system", "deployment/metrics-server", "--tail", "40")
		t.Fatalf("kubectl %s: %v\n%s\n%s", strings.Join(args, " "), err, out, logs)
	}
	return fields
}

// memMi reads kubectl top's memory column ("65Mi"); -1 if it is not in Mi.
func memMi(s string) int {
	var n int
	if _, err := fmt.Sscanf(s, "%dMi", &n); err != nil {
		return -1
	}
	return n
}

package e2e

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	draDriver    = "test-driver.cdi.k8s.io"
	draDriverRef = "hostlet.local/dra-test-driver:e2e"
	draLabel     = "app.kubernetes.io/name=dra-test-driver-kubelet-plugin"
)

// draPluginPermissions applies upstream's RBAC for the test driver's kubelet
// plugin (test-driver/deploy/example/plugin-permissions.yaml: its
// ServiceAccount, ClusterRole and binding, and the ValidatingAdmissionPolicy
// that lets it write only its own node's ResourceSlices, which needs the
// node name the API server puts into a pod-bound token) with names made
// the namespace's own, as upstream's e2e does. It returns the
// ServiceAccount's name.
func draPluginPermissions(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	dir, err := kubeModuleCommand(t, ctx, "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("locating k8s.io/kubernetes: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "test/e2e/dra/test-driver/deploy/example/plugin-permissions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "dra-kubelet-plugin-" + ns
	content := strings.ReplaceAll(string(b), "dra-kubelet-plugin-namespace", ns)
	content = strings.ReplaceAll(content, "dra-kubelet-plugin", prefix)
	f := filepath.Join(t.TempDir(), "plugin-permissions.yaml")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cluster.Kubectl(ctx, "apply", "-f", f); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The cluster-scoped ones outlive the namespace.
	t.Cleanup(func() { _, _ = cluster.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", f) })
	return prefix + "-service-account"
}

// draDriverDaemonSet is the test driver's kubelet plugin as upstream's
// e2e deploys it (testing-manifests/dra/dra-test-driver-proxy.yaml, there
// a ReplicaSet proxying to the e2e binary, here running the driver
// itself): privileged, the node's <root-dir>/plugins/<driver> and
// <root-dir>/plugins_registry as DirectoryOrCreate hostPaths mounted at
// the same paths (the socket path it registers must be the host's), the
// CDI spec dir at /cdi. On the host network with the API server's
// address: the harness's API server listens on loopback and no kube-proxy
// serves the kubernetes Service; the token is still the pod's own.
func draDriverDaemonSet(ns, nodeName, rootDir, cdiDir, serviceAccount string) *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": "dra-test-driver-kubelet-plugin"}
	socketDir := filepath.Join(rootDir, "plugins", draDriver)
	registry := filepath.Join(rootDir, "plugins_registry")
	api, _ := url.Parse(cluster.APIServerURL())
	host, port, _ := net.SplitHostPort(api.Host)
	privileged := true
	return nodeDaemonSet(ns, "dra-test-driver", nodeName, labels, v1.PodSpec{
		ServiceAccountName: serviceAccount,
		HostNetwork:        true,
		Volumes: []v1.Volume{
			hostPathVolume("socket-dir", socketDir, v1.HostPathDirectoryOrCreate),
			hostPathVolume("registration-dir", registry, v1.HostPathDirectoryOrCreate),
			hostPathVolume("cdi-dir", cdiDir, v1.HostPathDirectoryOrCreate),
		},
		Containers: []v1.Container{{
			Name: "plugin", Image: draDriverRef, ImagePullPolicy: v1.PullNever,
			Args: []string{"-v", "5", "kubelet-plugin", "--node-name", "$(NODE_NAME)", "--cdi-dir", "/cdi",
				"--datadir", filepath.Dir(socketDir), "--plugin-registration-path", registry},
			Env: []v1.EnvVar{
				{Name: "NODE_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				{Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "KUBERNETES_SERVICE_PORT", Value: port},
			},
			VolumeMounts: []v1.VolumeMount{
				{Name: "socket-dir", MountPath: socketDir},
				{Name: "registration-dir", MountPath: registry},
				{Name: "cdi-dir", MountPath: "/cdi"},
			},
			SecurityContext: &v1.SecurityContext{Privileged: &privileged},
		}},
	})
}

// claimPod uses one claim (named or from a template) in its container and
// prints the claim env the driver's CDI spec sets.
func claimPod(ns, name, nodeName string, claim v1.PodResourceClaim) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			NodeSelector:   map[string]string{v1.LabelHostname: nodeName},
			Tolerations:    []v1.Toleration{{Key: devicesTaint, Operator: v1.TolerationOpExists}},
			ResourceClaims: []v1.PodResourceClaim{claim},
			Containers: []v1.Container{{
				Name: "c", Image: images.BusyboxRef,
				Command:   []string{"sh", "-c", "env | grep ^claim_; trap 'exit 0' TERM; sleep 3600 & wait"},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: claim.Name}}},
			}},
		},
	}
}

// cdiSpecs lists the CDI specs the driver wrote (one per prepared claim).
func cdiSpecs(t *testing.T, dir string) []string {
	t.Helper()
	specs, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// waitUnprepared waits until the driver has removed the claim's CDI spec,
// which it does in NodeUnprepareResources.
func waitUnprepared(t *testing.T, ctx context.Context, spec string) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(spec)
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Fatalf("claim not unprepared after its pod was deleted: %s is still there", spec)
	}
}

// TestDeviceDRA runs upstream's DRA test driver (k8s.io/kubernetes
// test/e2e/dra/test-driver) as the cluster deploys a DRA driver: its
// kubelet plugin a DaemonSet pod on a hostlet node, with upstream's RBAC
// and admission policy. It registers through <root-dir>/plugins_registry
// and publishes its ResourceSlice; a pod with a ResourceClaim of its
// DeviceClass runs with the prepared device (the CDI env the driver writes
// for the claim); a restart of hostlet keeps that pod running, and once
// it is gone the claim is unprepared (the driver removes its CDI spec). A
// driver pod deleted and recreated by the DaemonSet registers again and
// prepares the claim of the next pod, made from a ResourceClaimTemplate.
func TestDeviceDRA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	kubeBinaryImage(t, ctx, "k8s.io/kubernetes/test/e2e/dra/test-driver", draDriverRef)
	cdiDir := t.TempDir()
	name := "hostlet-dra"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--cdi-spec-dirs", cdiDir, "--register-with-taints", devicesTaint + "=true:NoSchedule",
	}})
	ns := cluster.NewNamespace(t)
	c := cluster.Client()
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := cluster.Kubectl(context.Background(), "logs", "-n", ns, "-l", draLabel, "--tail", "60")
			t.Logf("driver log:\n%s", out)
		}
	})
	sa := draPluginPermissions(t, ctx, ns)
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, draDriverDaemonSet(ns, name, h.RootDir(), cdiDir, sa), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	defer scancel()
	if err := wait.PollUntilContextCancel(sctx, time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range l.Items {
			if s.Spec.NodeName != nil && *s.Spec.NodeName == name && s.Spec.Driver == draDriver {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		pods, _ := cluster.Kubectl(context.Background(), "get", "pods", "-n", ns, "-o", "wide")
		t.Fatalf("the driver published no ResourceSlice for %s: %v\n%s", name, err, pods)
	}

	// The policy is in force: the same ServiceAccount with another node's
	// name may not write this node's slices. The driver's writes passed,
	// so the token hostlet gave its pod is bound to the pod on this node.
	cfg := cluster.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {"elsewhere"}},
	}
	asSA, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stray := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "stray-"},
		Spec:       resourceapi.ResourceSliceSpec{Driver: draDriver, NodeName: &name, Pool: resourceapi.ResourcePool{Name: "stray", ResourceSliceCount: 1}},
	}
	if _, err := asSA.ResourceV1().ResourceSlices().Create(ctx, stray, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "running on node 'elsewhere' may not modify") {
		t.Fatalf("a slice written by the driver's ServiceAccount without a node: %v; want the policy's denial", err)
	}

	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + draDriver + `"`},
		}}},
	}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.ResourceV1().DeviceClasses().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	claimSpec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: ns},
	}}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim"}, Spec: claimSpec}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimName := "claim"
	cluster.CreatePod(t, claimPod(ns, "dra", name, v1.PodResourceClaim{Name: "my", ResourceClaimName: &claimName}))
	before, err := cluster.WaitForPod(ctx, ns, "dra", 2*time.Minute, harness.PodPhase(v1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	podLogHas(t, ctx, ns, "dra", "claim_claim_gpu=true")
	specs := cdiSpecs(t, cdiDir)
	if len(specs) != 1 {
		t.Fatalf("CDI specs of the prepared claim: %v", specs)
	}

	// A restart of hostlet: the claimed pod keeps its container; hostlet
	// has the driver, whose pod it adopts too, prepare the claim again.
	if err := h.Restart(ctx); err != nil {
		t.Fatalf("restarting hostlet: %v", err)
	}
	after, err := cluster.WaitForPod(ctx, ns, "dra", time.Minute, harness.PodPhase(v1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID {
		t.Fatalf("after a restart of hostlet the claimed pod is %s", harness.DescribePodStatus(after))
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, "dra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUnprepared(t, ctx, specs[0])

	// A driver restart: the DaemonSet's new pod registers again (its old
	// one removed its registration socket) and prepares the next claim.
	restartDaemonSetPod(t, ctx, ns, draLabel)
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu"},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec},
	}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.CreatePod(t, claimPod(ns, "dra2", name, v1.PodResourceClaim{Name: "my", ResourceClaimTemplateName: &tmpl.Name}))
	if _, err := cluster.WaitForPod(ctx, ns, "dra2", 2*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	// The generated claim is <pod>-<claim>-<random>.
	log := podLogHas(t, ctx, ns, "dra2", "claim_dra2_my_", "_gpu=true")
	if specs := cdiSpecs(t, cdiDir); len(specs) != 1 {
		t.Fatalf("CDI specs with the second claim prepared: %v (pod log %q)", specs, log)
	}
}

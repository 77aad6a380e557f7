package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const (
	sampleResource  = v1.ResourceName("example.com/resource")
	samplePluginRef = "hostlet.local/sample-device-plugin:e2e"
	devicesTaint    = "hostlet.test/devices"
)

// kubeModuleCommand is a go command run in test/cluster/kube, the module
// that pins k8s.io/kubernetes.
func kubeModuleCommand(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(root, "test", "cluster", "kube")
	return cmd
}

// buildKubeBinary builds a command of the k8s.io/kubernetes module pinned
// in test/cluster/kube (Go's build cache makes a second build cheap).
func buildKubeBinary(t *testing.T, ctx context.Context, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	start := time.Now()
	cmd := kubeModuleCommand(t, ctx, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	t.Logf("%s built in %s", pkg, time.Since(start).Round(time.Millisecond))
	return bin
}

// kubeBinaryImage builds a command of the k8s.io/kubernetes module and
// imports it as a one-binary image, ref, whose entrypoint is /<base of pkg>.
func kubeBinaryImage(t *testing.T, ctx context.Context, pkg, ref string) {
	t.Helper()
	exe, err := os.ReadFile(buildKubeBinary(t, ctx, pkg))
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := harness.WriteBinaryImage(archive, ref, filepath.Base(pkg), exe); err != nil {
		t.Fatal(err)
	}
	if err := cluster.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
}

// samplePluginDaemonSet is upstream's sample-device-plugin.yaml (CDI
// variant) pinned to one node, with the node's root dir in place of
// /var/lib/kubelet and the test's CDI dir in place of /var/run/cdi. /tmp is
// an emptyDir: the image has nothing but the binary.
func samplePluginDaemonSet(ns, nodeName, pluginDir, cdiDir string) *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": "sample-device-plugin"}
	return nodeDaemonSet(ns, "sample-device-plugin", nodeName, labels, v1.PodSpec{
		Volumes: []v1.Volume{
			hostPathVolume("device-plugin", pluginDir, v1.HostPathUnset), hostPathVolume("cdi-dir", cdiDir, v1.HostPathUnset),
			{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
		Containers: []v1.Container{{
			Name: "sample-device-plugin", Image: samplePluginRef, ImagePullPolicy: v1.PullNever,
			Env: []v1.EnvVar{{Name: "PLUGIN_SOCK_DIR", Value: "/var/lib/kubelet/device-plugins"}, {Name: "CDI_ENABLED", Value: "1"}},
			VolumeMounts: []v1.VolumeMount{
				{Name: "device-plugin", MountPath: "/var/lib/kubelet/device-plugins"},
				{Name: "cdi-dir", MountPath: "/var/run/cdi"},
				{Name: "tmp", MountPath: "/tmp"},
			},
		}},
	})
}

// nodeDaemonSet runs pod on the node only, whatever its taints.
func nodeDaemonSet(ns, name, nodeName string, labels map[string]string, pod v1.PodSpec) *appsv1.DaemonSet {
	pod.NodeSelector = map[string]string{v1.LabelHostname: nodeName}
	pod.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

func hostPathVolume(name, path string, typ v1.HostPathType) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path, Type: &typ}}}
}

// devicePod asks for n sample devices and prints what the plugin gave it.
// It is deleted gracefully: with a grace of 0 the API forgets it at once
// and the scheduler would place the next pod on devices still in use.
func devicePod(ns, name, nodeName string, n int64) *v1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	script := `for f in /tmp/Dev-1 /tmp/Dev-2; do [ -e $f ] && echo mount $f; done
for f in /tmp/CDI-Dev-1 /tmp/CDI-Dev-2; do [ -b $f ] && echo blockdev $f; done
echo env CDI_DEVICE=$CDI_DEVICE
trap 'exit 0' TERM
sleep 3600 & wait`
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			NodeSelector: map[string]string{v1.LabelHostname: nodeName},
			Tolerations:  []v1.Toleration{{Key: devicesTaint, Operator: v1.TolerationOpExists}},
			Containers: []v1.Container{{
				Name: "c", Image: images.BusyboxRef, Command: []string{"sh", "-c", script},
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{sampleResource: q}},
			}},
		},
	}
}

func deviceCounts(capacity, allocatable int64) func(*v1.Node) (bool, error) {
	return func(n *v1.Node) (bool, error) {
		c, a := n.Status.Capacity[sampleResource], n.Status.Allocatable[sampleResource]
		return c.Value() == capacity && a.Value() == allocatable, nil
	}
}

// podLogHas waits until the pod's log has every line.
func podLogHas(t *testing.T, ctx context.Context, ns, name string, lines ...string) string {
	t.Helper()
	var got string
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		b, err := cluster.Client().CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		got = string(b)
		for _, l := range lines {
			if !strings.Contains(got, l) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s log: want %q, got %q", name, lines, got)
	}
	return got
}

// podResourcesDevices asks the pod resources API which sample devices the
// pod's container holds and which the node can allocate.
func podResourcesDevices(t *testing.T, ctx context.Context, socket, ns, pod string) (held, allocatable []string) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	list, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod resources List: %v", err)
	}
	for _, p := range list.PodResources {
		if p.Namespace != ns || p.Name != pod {
			continue
		}
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == string(sampleResource) {
					held = append(held, d.DeviceIds...)
				}
			}
		}
	}
	got, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: pod, PodNamespace: ns})
	if err != nil {
		t.Fatalf("pod resources Get: %v", err)
	}
	var viaGet []string
	for _, c := range got.PodResources.Containers {
		for _, d := range c.Devices {
			viaGet = append(viaGet, d.DeviceIds...)
		}
	}
	slices.Sort(held)
	slices.Sort(viaGet)
	if !slices.Equal(held, viaGet) {
		t.Errorf("pod resources: List says %v, Get says %v", held, viaGet)
	}
	alloc, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatalf("pod resources GetAllocatableResources: %v", err)
	}
	for _, d := range alloc.Devices {
		if d.ResourceName == string(sampleResource) {
			allocatable = append(allocatable, d.DeviceIds...)
		}
	}
	slices.Sort(allocatable)
	return held, allocatable
}

// restartDaemonSetPod deletes the one pod of a DaemonSet and waits until
// the pod that replaces it runs.
func restartDaemonSetPod(t *testing.T, ctx context.Context, ns, selector string) {
	t.Helper()
	c := cluster.Client()
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods %s: %v, %v", selector, pods, err)
	}
	old := pods.Items[0].UID
	if err := c.CoreV1().Pods(ns).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for _, p := range l.Items {
			if p.UID != old && p.Status.Phase == v1.PodRunning {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the DaemonSet's new pod (%s) never ran: %v", selector, err)
	}
}

// TestDevicePlugin runs upstream's sample device plugin as a DaemonSet on
// a node of its own: it registers and the node shows its two devices; a
// pod asking for both gets them (mounts and CDI devices as the plugin
// answers); a third pod waits Pending, and one bound past the scheduler is
// rejected with the kubelet's UnexpectedAdmissionError; the pod resources
// API lists the assignment; a restart of hostlet keeps it; a restarted
// plugin registers again and serves the next pod.
func TestDevicePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	kubeBinaryImage(t, ctx, "k8s.io/kubernetes/test/images/sample-device-plugin", samplePluginRef)
	cdiDir := t.TempDir()
	name := "hostlet-devices"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--cdi-spec-dirs", cdiDir, "--register-with-taints", devicesTaint + "=true:NoSchedule",
	}})
	// hostlet makes a missing mount source a directory, as CRI does; the
	// plugin's are /tmp/Dev-N on the host.
	t.Cleanup(func() {
		for _, d := range []string{"/tmp/Dev-1", "/tmp/Dev-2"} {
			_ = os.Remove(d)
		}
	})
	ns := cluster.NewNamespace(t)
	c := cluster.Client()
	pluginDir := filepath.Join(h.RootDir(), "device-plugins")
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, samplePluginDaemonSet(ns, name, pluginDir, cdiDir), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, name, 3*time.Minute, deviceCounts(2, 2)); err != nil {
		t.Fatalf("node never showed 2 sample devices: %v", err)
	}

	two := cluster.CreatePod(t, devicePod(ns, "two", name, 2))
	if _, err := cluster.WaitForPod(ctx, ns, "two", 2*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	podLogHas(t, ctx, ns, "two", "mount /tmp/Dev-1", "mount /tmp/Dev-2", "blockdev /tmp/CDI-Dev-1", "blockdev /tmp/CDI-Dev-2", "env CDI_DEVICE=CDI-Dev-")

	cluster.CreatePod(t, devicePod(ns, "three", name, 1))
	if _, err := cluster.WaitForPod(ctx, ns, "three", time.Minute, func(p *v1.Pod) (bool, error) {
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionFalse && cond.Reason == v1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod over capacity not held Pending: %v", err)
	}

	socket := filepath.Join(h.RootDir(), "pod-resources", "kubelet.sock")
	held, alloc := podResourcesDevices(t, ctx, socket, ns, "two")
	if want := []string{"Dev-1", "Dev-2"}; !slices.Equal(held, want) || !slices.Equal(alloc, want) {
		t.Fatalf("pod resources: pod two holds %v, allocatable %v; want %v for both", held, alloc, want)
	}

	// A restart of hostlet: the pod keeps its container and its devices,
	// the plugin registers again when kubelet.sock comes back.
	before, err := c.CoreV1().Pods(ns).Get(ctx, "two", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(ctx); err != nil {
		t.Fatalf("restarting hostlet: %v", err)
	}
	if held, _ := podResourcesDevices(t, ctx, socket, ns, "two"); !slices.Equal(held, []string{"Dev-1", "Dev-2"}) {
		t.Fatalf("after a restart, pod two holds %v in the pod resources API", held)
	}
	if _, err := cluster.WaitForNode(ctx, name, 3*time.Minute, deviceCounts(2, 2)); err != nil {
		t.Fatalf("plugin did not register again after a restart of hostlet: %v", err)
	}
	after, err := c.CoreV1().Pods(ns).Get(ctx, "two", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Phase != v1.PodRunning || after.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID {
		t.Fatalf("after a restart of hostlet pod two is %s", harness.DescribePodStatus(after))
	}

	// Bound past the scheduler: no device is handed out twice.
	over := devicePod(ns, "bound", name, 1)
	over.Spec.NodeName, over.Spec.NodeSelector = name, nil
	cluster.CreatePod(t, over)
	rejected, err := cluster.WaitForPod(ctx, ns, "bound", time.Minute, harness.PodPhase(v1.PodFailed))
	if err != nil {
		t.Fatal(err)
	}
	wantMsg := "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0, which is unexpected"
	if rejected.Status.Reason != "UnexpectedAdmissionError" || rejected.Status.Message != wantMsg {
		t.Fatalf("pod bound over capacity: reason %q message %q; want UnexpectedAdmissionError %q", rejected.Status.Reason, rejected.Status.Message, wantMsg)
	}

	// A plugin restart: the DaemonSet's new pod registers again and serves
	// the waiting pod once two's devices are free.
	restartDaemonSetPod(t, ctx, ns, "k8s-app=sample-device-plugin")
	if _, err := cluster.WaitForNode(ctx, name, 3*time.Minute, deviceCounts(2, 2)); err != nil {
		t.Fatalf("restarted plugin did not register again: %v", err)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, two.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForPod(ctx, ns, "three", 2*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	log := podLogHas(t, ctx, ns, "three", "mount /tmp/Dev-")
	if strings.Count(log, "blockdev ") != 1 {
		t.Fatalf("pod three should see exactly one CDI device:\n%s", log)
	}
}

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// nodeCIDRMask is the size of the pod CIDRs the controller-manager hands
// the nodes of a flannel cluster out of its pod /24.
const nodeCIDRMask = 26

func newFlannelDirs(t *testing.T) harness.FlannelDirs { return harness.NewFlannelDirs(t.TempDir()) }

// deployFlannel builds flannel and its image and deploys it over c's pod
// /24 with the dirs d (harness.Cluster.DeployFlannel).
func deployFlannel(t *testing.T, c *harness.Cluster, d harness.FlannelDirs, ifaceArg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	t0 := time.Now()
	a := harness.AddonImages{ImageDir: filepath.Join(imageCache(), "images"), Import: c.ImportImage}
	if err := c.DeployFlannel(ctx, a, d, nodeCIDRMask, ifaceArg); err != nil {
		t.Fatal(err)
	}
	t.Logf("flannel and its image built and applied in %v", time.Since(t0).Round(time.Second))
}

// The cluster's CNI DaemonSet on a hostlet node: the node starts with an
// empty CNI config dir and is NotReady with the kubelet's message; flannel
// (host-gw, --kube-subnet-mgr) runs as a DaemonSet pod on it, its init
// containers install the plugin and the conflist, and the node turns Ready
// without a restart. Pods get addresses from the node's podCIDR (allocated
// by the controller-manager) through flannel's plugin, and reach each other
// and a ClusterIP Service (kube-proxy) backed by them. flanneld keeps
// running across a restart of hostlet.
func TestFlannelDaemonSet(t *testing.T) {
	skipIfNoCluster(t)
	const node = "hostlet-flannel"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true, NodeCIDRMaskSize: nodeCIDRMask})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	importTestImages(t, c)
	dirs := newFlannelDirs(t)
	h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: node, NoWaitReady: true,
		ExtraArgs: dirs.HostletArgs()})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.WaitForNode(ctxT(t), node, 2*time.Minute, func(n *v1.Node) (bool, error) {
		ok, err := conditionIs(v1.NodeReady, v1.ConditionFalse, cniNotReady)(n)
		return ok && len(n.Spec.PodCIDRs) == 1, err
	})
	if err != nil {
		t.Fatalf("NotReady with the kubelet's message and a pod CIDR: %v", err)
	}
	podCIDR := n.Spec.PodCIDRs[0]

	deployKubeProxy(t, c)
	deployFlannel(t, c, dirs, "--iface=eth0")
	if err := c.WaitNodeReady(ctxT(t), node); err != nil {
		pods, _ := c.Kubectl(ctxT(t), "get", "pods", "-A", "-o", "wide")
		logs, _ := c.Kubectl(ctxT(t), "logs", "-n", "kube-flannel", "ds/kube-flannel-ds", "--tail", "40")
		t.Fatalf("Ready after flannel's conflist: %v\n%s\n%s", err, pods, logs)
	}
	if _, err := os.Stat(filepath.Join(dirs.Bin, "flannel")); err != nil {
		t.Errorf("flannel's CNI plugin not installed: %v", err)
	}
	// The conflist (an init container's) makes the node Ready; flanneld
	// writes its lease of the node's pod CIDR soon after.
	pollUntil(t, 2*time.Minute, "flanneld's subnet.env for pod CIDR "+podCIDR, func() bool {
		env, _ := os.ReadFile(filepath.Join(dirs.Run, "subnet.env"))
		return strings.Contains(string(env), "FLANNEL_SUBNET="+gatewayOf(t, podCIDR)+"\n")
	})

	ns := c.NewNamespace(t)
	svc := webService(t, c, ns, node, 2, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}})
	client := clientPod(t, c, ns, node)
	_, cidr, _ := net.ParseCIDR(podCIDR)
	for _, name := range []string{"web-0", "web-1", client} {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !cidr.Contains(net.ParseIP(p.Status.PodIP)) {
			t.Errorf("pod %s has IP %q, not from the node's pod CIDR %s", name, p.Status.PodIP, podCIDR)
		}
		if name == client {
			continue
		}
		if got := fetchFrom(t, c, ns, client, p.Status.PodIP, "8080"); got != name {
			t.Errorf("pod %s at %s answered %q", name, p.Status.PodIP, got)
		}
	}
	// flannel's plugin keeps each attachment's delegate config by
	// container: the pods' network is flannel's.
	if ents, err := os.ReadDir(filepath.Join(dirs.Data, "flannel")); err != nil || len(ents) != 3 {
		t.Errorf("flannel plugin's attachments in %s: %v %v, want 3", dirs.Data, ents, err)
	}
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		seen[fetchFrom(t, c, ns, client, svc.Spec.ClusterIP, "80")] = true
	}
	if !seen["web-0"] || !seen["web-1"] || len(seen) != 2 {
		t.Errorf("ClusterIP %s answered %v, want web-0 and web-1", svc.Spec.ClusterIP, seen)
	}

	// flanneld keeps running, not restarted, across a restart of hostlet,
	// and a pod started after it is on flannel's network too.
	flannelPod := func() *v1.Pod {
		pods, err := c.Client().CoreV1().Pods("kube-flannel").List(ctxT(t), metav1.ListOptions{LabelSelector: "app=flannel"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("flannel pods: %v %v", pods, err)
		}
		return &pods.Items[0]
	}
	before := flannelPod()
	if err := h.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodeReady(ctxT(t), node); err != nil {
		t.Fatal(err)
	}
	late := testapp(ns, "web-late")
	late.Spec.NodeName = node
	c.CreatePod(t, late)
	p, err := c.WaitForPod(ctxT(t), ns, late.Name, 2*time.Minute, harness.PodReady)
	if err != nil {
		t.Fatal(err)
	}
	if got := fetchFrom(t, c, ns, client, p.Status.PodIP, "8080"); got != late.Name || !cidr.Contains(net.ParseIP(p.Status.PodIP)) {
		t.Errorf("pod started after a restart of hostlet at %s answered %q", p.Status.PodIP, got)
	}
	after := flannelPod()
	if after.UID != before.UID || len(after.Status.ContainerStatuses) != 1 || after.Status.ContainerStatuses[0].RestartCount != 0 ||
		after.Status.ContainerStatuses[0].State.Running == nil ||
		!after.Status.ContainerStatuses[0].State.Running.StartedAt.Equal(&before.Status.ContainerStatuses[0].State.Running.StartedAt) {
		t.Errorf("flannel after a restart of hostlet: %s", harness.DescribePodStatus(after))
	}
}

// gatewayOf is the first address of cidr with its prefix length, as
// flanneld writes FLANNEL_SUBNET (the bridge's address).
func gatewayOf(t *testing.T, cidr string) string {
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	ip = ip.Mask(n.Mask).To4()
	ip[3]++
	ones, _ := n.Mask.Size()
	return fmt.Sprintf("%s/%d", ip, ones)
}

// importTestImages imports the test images into c's containerd.
func importTestImages(t *testing.T, c *harness.Cluster) {
	t.Helper()
	imgs, err := images.BuildAll(ctxT(t), filepath.Join(imageCache(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if err := c.ImportImage(ctxT(t), img.Archive); err != nil {
			t.Fatal(err)
		}
	}
}

// Two hosts on one machine: the cluster's node and a second host, each a
// hostlet with its own containerd in its own network namespace, the second
// in its own mount namespace with its own CNI bin and config dirs,
// /run/flannel and /var/lib/cni at the same paths (a DaemonSet's hostPaths
// are the same on every node), linked by a veth pair. flannel's host-gw
// backend routes each node's pod CIDR through the other's address; pods
// reach each other across the nodes, and a ClusterIP Service backed by a
// pod on each node answers from both, through the nodes' kube-proxy.
func TestFlannelTwoHosts(t *testing.T) {
	skipIfNoCluster(t)
	const nodeA, nodeB = "hostlet-fl-a", "hostlet-fl-b"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true, NodeCIDRMaskSize: nodeCIDRMask})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	dirs, own := newFlannelDirs(t), newFlannelDirs(t)
	for _, d := range []string{dirs.Bin, dirs.Conf, dirs.Run, dirs.Data} {
		mkdir(t, d)
	}
	hostB, err := c.AddHost(ctx, "b", harness.HostOptions{Binds: dirs.BindsOver(own)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hostB.Stop) // before the cluster's
	importTestImages(t, c)
	imgs, err := images.BuildAll(ctx, filepath.Join(imageCache(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if err := hostB.ImportImage(ctx, img.Archive); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []harness.HostletOptions{{NodeName: nodeA}, {NodeName: nodeB, Host: hostB}} {
		o.Binary, o.NoWaitReady, o.ExtraArgs = hostletBinary(t), true, dirs.HostletArgs()
		if _, err := c.StartHostlet(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	podCIDR := map[string]string{}
	for _, node := range []string{nodeA, nodeB} {
		n, err := c.WaitForNode(ctxT(t), node, 2*time.Minute, func(n *v1.Node) (bool, error) {
			ok, err := conditionIs(v1.NodeReady, v1.ConditionFalse, cniNotReady)(n)
			return ok && len(n.Spec.PodCIDRs) == 1, err
		})
		if err != nil {
			t.Fatalf("%s NotReady with the kubelet's message and a pod CIDR: %v", node, err)
		}
		podCIDR[node] = n.Spec.PodCIDRs[0]
	}

	// The second host's containerd needs the components' images too.
	for _, comp := range []struct {
		name  string
		build func(context.Context, string, string) (images.Image, error)
	}{{"kube-proxy", images.BuildKubeProxy}, {"flannel", images.BuildFlannel}} {
		bctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		bin, err := harness.BuildComponent(bctx, t.Logf, comp.name)
		if err != nil {
			t.Fatal(err)
		}
		img, err := comp.build(bctx, filepath.Join(imageCache(), "images"), bin)
		if err == nil {
			err = hostB.ImportImage(bctx, img.Archive)
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	deployKubeProxy(t, c)
	// Both nodes' flanneld use their address on the link.
	linkPrefix := strings.TrimSuffix(hostB.LinkSubnet(), "0/24")
	deployFlannel(t, c, dirs, "--iface-regex=^"+strings.ReplaceAll(linkPrefix, ".", `\.`))
	for _, node := range []string{nodeA, nodeB} {
		if err := c.WaitNodeReady(ctxT(t), node); err != nil {
			pods, _ := c.Kubectl(ctxT(t), "get", "pods", "-A", "-o", "wide")
			t.Fatalf("%s Ready after flannel's conflist: %v\n%s", node, err, pods)
		}
	}
	// host-gw: flanneld on each node routes the other's pod CIDR through
	// its address on the link (soon after the conflist made them Ready).
	for _, r := range []struct{ netns, cidr, via string }{
		{c.NodeNetnsPath(), podCIDR[nodeB], hostB.IP()},
		{hostB.NetnsPath(), podCIDR[nodeA], strings.TrimSuffix(hostB.LinkSubnet(), "0/24") + "1"},
	} {
		pollUntil(t, 2*time.Minute, fmt.Sprintf("a route to %s via %s in %s", r.cidr, r.via, r.netns), func() bool {
			out, err := exec.Command("nsenter", "--net="+r.netns, "ip", "route", "show", r.cidr).CombinedOutput()
			return err == nil && strings.Contains(string(out), "via "+r.via+" ")
		})
	}

	ns := c.NewNamespace(t)
	for _, p := range []struct{ name, node string }{{"web-a", nodeA}, {"web-b", nodeB}} {
		pod := testapp(ns, p.name)
		pod.Labels = map[string]string{"app": "web"}
		pod.Spec.NodeName = p.node
		c.CreatePod(t, pod)
	}
	for _, p := range []struct{ name, node string }{{"client-a", nodeA}, {"client-b", nodeB}} {
		pod := busybox(ns, p.name, "sleep", "3600")
		pod.Spec.NodeName = p.node
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		c.CreatePod(t, pod)
	}
	ips := map[string]string{}
	for _, p := range []struct{ name, node string }{{"web-a", nodeA}, {"web-b", nodeB}, {"client-a", nodeA}, {"client-b", nodeB}} {
		pod, err := c.WaitForPod(ctxT(t), ns, p.name, 2*time.Minute, harness.PodReady)
		if err != nil {
			t.Fatal(err)
		}
		_, cidr, _ := net.ParseCIDR(podCIDR[p.node])
		if !cidr.Contains(net.ParseIP(pod.Status.PodIP)) {
			t.Errorf("pod %s on %s has IP %q, not from the node's pod CIDR %s", p.name, p.node, pod.Status.PodIP, cidr)
		}
		ips[p.name] = pod.Status.PodIP
	}
	for _, client := range []string{"client-a", "client-b"} {
		for _, web := range []string{"web-a", "web-b"} {
			if got := fetchFrom(t, c, ns, client, ips[web], "8080"); got != web {
				t.Errorf("%s: pod %s at %s answered %q", client, web, ips[web], got)
			}
		}
	}

	svc, err := c.Client().CoreV1().Services(ns).Create(ctxT(t), &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, client := range []string{"client-a", "client-b"} {
		seen := map[string]bool{}
		for i := 0; i < 40 && len(seen) < 2; i++ {
			seen[fetchFrom(t, c, ns, client, svc.Spec.ClusterIP, "80")] = true
		}
		if !seen["web-a"] || !seen["web-b"] || len(seen) != 2 {
			t.Errorf("%s: ClusterIP %s answered %v, want web-a and web-b", client, svc.Spec.ClusterIP, seen)
		}
	}
}

func mkdir(t *testing.T, dir string) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

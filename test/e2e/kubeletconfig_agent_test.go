package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The node agent's own settings as the kubelet applies them: oomScoreAdj
// is hostlet's /proc/<pid>/oom_score_adj, maxOpenFiles its open-file
// limit (soft and hard), and syncFrequency how soon a ConfigMap update
// shows in a running pod's volume (10s here, where the default minute
// would take 60 to 90s). The values raise the OOM score and lower the
// limit, which needs no CAP_SYS_RESOURCE (the test host may not grant it;
// the kubelet's defaults, -999 and 1000000, would then be logged as
// failed, as the kubelet logs them). /debug/flags/v (enableDebugFlagsHandler,
// on by default) takes a new verbosity.
func TestKubeletConfigAgentSettings(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-kubeletconfig-agent"
	h := extraNode(t, harness.HostletOptions{NodeName: name,
		KubeletConfig: kcHeader + "oomScoreAdj: 500\nmaxOpenFiles: 4096\nsyncFrequency: 10s\ncontentType: application/json\n"})
	proc := fmt.Sprintf("/proc/%d/", h.Pid())
	if b, err := os.ReadFile(proc + "oom_score_adj"); err != nil || strings.TrimSpace(string(b)) != "500" {
		t.Errorf("hostlet's oom_score_adj %q (%v), want 500", b, err)
	}
	limits, err := os.ReadFile(proc + "limits")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, line := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			files = strings.Fields(strings.TrimPrefix(line, "Max open files"))
		}
	}
	if len(files) < 2 || files[0] != "4096" || files[1] != "4096" {
		t.Errorf("hostlet's open-file limit %q, want 4096 soft and hard", files)
	}

	ctx := ctxT(t)
	rt, err := rest.TransportFor(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("https://127.0.0.1:%d/debug/flags/v", h.Port()), strings.NewReader("4"))
	resp, err := (&http.Client{Transport: rt, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "successfully set klog.logging.verbosity to 4" {
		t.Errorf("PUT /debug/flags/v: %d %q", resp.StatusCode, body)
	}
	if b, _ := os.ReadFile(h.LogPath()); !strings.Contains(string(b), "log verbosity set through /debug/flags/v") {
		t.Errorf("hostlet's log does not say the verbosity was set")
	}

	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	cm, err := c.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"a": "one"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "vols", "sleep", "3600")
	pod.Spec.NodeName = name
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	waitExecOutput(t, ns, pod.Name, "c", "one", 30*time.Second, "cat", "/cfg/a")
	cm.Data["a"] = "uno"
	if _, err := c.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Within a period and a half and the watch's delivery.
	took := waitExecOutput(t, ns, pod.Name, "c", "uno", 25*time.Second, "cat", "/cfg/a")
	t.Logf("ConfigMap update visible after %v", took.Round(time.Second))
}

// podCIDR (--pod-cidr) is the range of hostlet's default bridge network
// while the Node has no spec.podCIDRs, as the kubelet hands it to its
// runtime at start: a pod's IP comes from it.
func TestKubeletConfigPodCIDR(t *testing.T) {
	skipIfNoCluster(t)
	const podCIDR = "10.245.8.0/24"
	const name = "hostlet-podcidr"
	c, err := harness.Start(ctxT(t), harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	importTestImages(t, c)
	h, err := c.StartHostlet(ctxT(t), harness.HostletOptions{Binary: hostletBinary(t), NodeName: name,
		KubeletConfig: kcHeader + "podCIDR: " + podCIDR + "\n",
		ExtraArgs:     []string{"--cni-conf-dir", t.TempDir(), "--cni-default-bridge", "p" + c.BridgeName()[2:]}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	ns := c.NewNamespace(t)
	pod := busybox(ns, "plain", "sleep", "3600")
	pod.Spec.NodeName = name
	c.CreatePod(t, pod)
	p := waitPodIn(t, c, ns, pod.Name, v1.PodRunning)
	if _, n, _ := net.ParseCIDR(podCIDR); !n.Contains(net.ParseIP(p.Status.PodIP)) {
		t.Errorf("pod IP %s not from podCIDR %s", p.Status.PodIP, podCIDR)
	}
	if node, err := c.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{}); err == nil && len(node.Spec.PodCIDRs) > 0 {
		t.Errorf("the Node has pod CIDRs %q: the test needs a node without", node.Spec.PodCIDRs)
	}
}

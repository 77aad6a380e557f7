package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
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
		KubeletConfigDropins: map[string]string{"10-register.conf": kcHeader + "registerNode: false\n"},
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
	for _, want := range []string{"does not implement", `cpuManagerPolicy: "static"`, "registerNode: false"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if _, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{}); err == nil {
		t.Error("the node registered")
	}
}

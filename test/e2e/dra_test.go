package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const draDriver = "test-driver.cdi.k8s.io"

// TestDeviceDRA runs upstream's DRA test driver (k8s.io/kubernetes
// test/e2e/dra/test-driver, its kubelet plugin as a host process, as
// upstream's e2e does) against a hostlet node: it registers through
// <root-dir>/plugins_registry and publishes its ResourceSlice; a pod with a
// ResourceClaim of its DeviceClass runs with the prepared device (the CDI
// env the driver writes for the claim), and once the pod is gone the claim
// is unprepared (the driver removes its CDI spec).
func TestDeviceDRA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := buildKubeBinary(t, ctx, "k8s.io/kubernetes/test/e2e/dra/test-driver")
	cdiDir := t.TempDir()
	name := "hostlet-dra"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--cdi-spec-dirs", cdiDir, "--register-with-taints", devicesTaint + "=true:NoSchedule",
	}})
	logPath := filepath.Join(t.TempDir(), "driver.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	driver := exec.Command(bin, "--kubeconfig", cluster.KubeconfigPath(), "-v", "5", "kubelet-plugin",
		"--node-name", name, "--cdi-dir", cdiDir,
		"--plugin-registration-path", filepath.Join(h.RootDir(), "plugins_registry"),
		"--datadir", filepath.Join(h.RootDir(), "plugins"))
	driver.Stdout, driver.Stderr = logf, logf
	// The driver makes the parent of its socket dir only.
	if err := os.MkdirAll(filepath.Join(h.RootDir(), "plugins", draDriver), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := driver.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = driver.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = driver.Process.Signal(os.Interrupt)
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("driver log:\n%s", b)
		}
	})

	c := cluster.Client()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	if err := wait.PollUntilContextCancel(sctx, time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, os.ErrProcessDone
		default:
		}
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
		t.Fatalf("the driver published no ResourceSlice for %s: %v", name, err)
	}

	ns := cluster.NewNamespace(t)
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
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: ns},
		}}}},
	}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimName := "claim"
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dra"},
		Spec: v1.PodSpec{
			NodeSelector:   map[string]string{v1.LabelHostname: name},
			Tolerations:    []v1.Toleration{{Key: devicesTaint, Operator: v1.TolerationOpExists}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "my", ResourceClaimName: &claimName}},
			Containers: []v1.Container{{
				Name: "c", Image: images.BusyboxRef,
				Command:   []string{"sh", "-c", "env | grep ^claim_; trap 'exit 0' TERM; sleep 3600 & wait"},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "my"}}},
			}},
		},
	}
	cluster.CreatePod(t, pod)
	if _, err := cluster.WaitForPod(ctx, ns, "dra", 2*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	podLogHas(t, ctx, ns, "dra", "claim_claim_gpu=true")
	specs, _ := filepath.Glob(filepath.Join(cdiDir, "*.json"))
	if len(specs) != 1 {
		t.Fatalf("CDI specs of the prepared claim: %v", specs)
	}

	if err := c.CoreV1().Pods(ns).Delete(ctx, "dra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(specs[0])
		return os.IsNotExist(err), nil
	}); err != nil {
		left, _ := filepath.Glob(filepath.Join(cdiDir, "*"))
		t.Fatalf("claim not unprepared after the pod was deleted: %s", strings.Join(left, " "))
	}
}

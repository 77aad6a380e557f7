package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images/csihostdir"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaveCSINode is the node the CSI leave test joins.
const leaveCSINode = "leavecsi" // short: sockets below its root dir fit sun_path

// `hostlet leave` on a node whose DaemonSet pod (a drain leaves it) uses a
// staged CSI PersistentVolume and a CSI Block one: with the driver gone, leave stops before
// anything is killed or removed and names the volume and the driver; with
// the driver back (a host process registered in the plugin registry),
// leave has it unpublish and unstage both volumes, kills the pod and removes
// the root dir, with nothing mounted below it and the volume's data kept.
func TestLeaveTearsDownCSIVolumes(t *testing.T) {
	skipIfNoCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin := hostletBinary(t)
	client := cluster.Client()
	kubeDNSService(ctx, t)
	chart := installChart(ctx, t, "leavecsi", "--set", "clusterInfo.server="+cluster.APIServerURL())
	server, token := chart.joinCommand(t, "")
	state := filepath.Join(t.TempDir(), "state")
	if out, err := hostletJoin(ctx, bin, state, leaveCSINode, server, token, caHashOf(t, cluster.CACertFile())); err != nil {
		t.Fatalf("hostlet join: %v\n%s", err, out)
	}
	h, err := cluster.StartJoinedHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: leaveCSINode}, filepath.Join(state, "config.yaml"))
	if h != nil {
		t.Cleanup(func() {
			h.Stop()
			_ = client.CoreV1().Nodes().Delete(context.Background(), leaveCSINode, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	root := h.RootDir()

	ns := cluster.NewNamespace(t)
	name := csiDriverName(ns)
	csiDriverObject(t, name, false, "", storagev1.VolumeLifecyclePersistent)
	// A second driver, which goes for good: only leave --force gets its
	// volume off the node.
	gone := "g" + name
	csiDriverObject(t, gone, false, "", storagev1.VolumeLifecyclePersistent)
	driverState, goneState := t.TempDir(), t.TempDir()
	startDriver := func(name, state string) (*csihostdir.Driver, context.CancelFunc) {
		dctx, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		d, err := csihostdir.Start(dctx, csihostdir.Config{Name: name, NodeID: leaveCSINode, StateDir: state, Stage: true,
			Endpoint:    filepath.Join(root, "plugins", name, "csi.sock"),
			RegistryDir: filepath.Join(root, "plugins_registry")})
		if err != nil {
			t.Fatal(err)
		}
		return d, stop
	}
	d, stop := startDriver(name, driverState)
	awaitRegistration(t, d)
	dg, stopGone := startDriver(gone, goneState)
	awaitRegistration(t, dg)

	pv := ns + "-csi"
	persistentVolume(t, pv, "", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: name, VolumeHandle: "vol1"}}, nil)
	claim(t, ns, "data", "", pv)
	persistentVolume(t, pv+"g", "", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: gone, VolumeHandle: "vol2"}}, nil)
	claim(t, ns, "gone", "", pv+"g")
	// A Block PV of the driver too, where losetup is there (the driver
	// attaches a loop device).
	_, lerr := exec.LookPath("losetup")
	block := lerr == nil
	if block {
		csiBlockClaim(t, ns, name, ns+"-cblk", "blk1", "", 8<<20)
		file := csihostdir.BlockFile(driverState, "blk1")
		t.Cleanup(func() {
			_ = exec.Command("sh", "-c", "losetup -j "+file+" | cut -d: -f1 | xargs -r -n1 losetup -d").Run()
		})
	}
	labels := map[string]string{"app": "csi-kept"}
	spec := claimPodSpec(ns, "app", "data", false).Spec
	if block {
		spec.Volumes = append(spec.Volumes, v1.Volume{Name: "blk", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "blk"}}})
		spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "blk", DevicePath: "/dev/xblk"}}
	}
	spec.Volumes = append(spec.Volumes, v1.Volume{Name: "gone", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "gone"}}})
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "gone", MountPath: "/gone"})
	spec.TerminationGracePeriodSeconds = ptr[int64](1)
	spec.RestartPolicy = v1.RestartPolicyAlways
	spec.Containers[0].Command = []string{"sh", "-c", "echo kept > /data/f && exec sleep 3600"}
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, nodeDaemonSet(ns, "csi-kept", leaveCSINode, labels, spec), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, labels, 1, leaveCSINode)
	pollUntil(t, time.Minute, "the pod's file in the driver's volume", func() bool {
		_, err := os.Stat(filepath.Join(csihostdir.VolumeDir(driverState, "vol1"), "f"))
		return err == nil
	})
	if m := mountsUnder(t, root); len(m) < 4 {
		t.Fatalf("the volumes staged and published: mounts below the root dir %v", m)
	}

	leave := func(extra ...string) (string, error) {
		pid := h.Pid()
		cmd := exec.CommandContext(ctx, bin, append([]string{"leave", "--state-dir", state, "--skip-systemd", "--timeout", "3m",
			"--hostlet-arg", "pod-logs-dir=" + h.PodLogsDir(), "--hostlet-arg", "container-logs-dir=" + h.ContainerLogsDir(),
			"--hostlet-arg", "cgroup-root=" + h.CgroupRoot(), "--logind-conf-dir", t.TempDir(),
			"--stop-command", fmt.Sprintf("kill -TERM %d 2>/dev/null; while kill -0 %d 2>/dev/null; do sleep 0.2; done", pid, pid)}, extra...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// The drivers stop (their sockets go): leave cannot tear the volumes
	// down.
	stop()
	stopGone()
	pollUntil(t, time.Minute, "the driver's registration socket to go", func() bool {
		es, _ := os.ReadDir(filepath.Join(root, "plugins_registry"))
		return len(es) == 0
	})
	out, err := leave()
	t.Logf("hostlet leave without the driver:\n%s", out)
	if err == nil || !strings.Contains(out, `volume "`+pv+`"`) || !strings.Contains(out, "driver "+name) ||
		!strings.Contains(out, "driver "+gone) || !strings.Contains(out, "run hostlet leave again") {
		t.Fatalf("leave without the drivers: want a refusal naming the volumes and the drivers, got %v", err)
	}
	if m := mountsUnder(t, root); len(m) < 4 {
		t.Errorf("mounts below the root dir after the refused leave: %v", m)
	}
	unpublished := func() int { return len(csiCalls(t, driverState, "NodeUnpublishVolume")) }
	if n := unpublished(); n != 0 {
		t.Errorf("NodeUnpublishVolume calls without the driver: %d", n)
	}

	// The first driver back (hostlet is stopped: nobody answers its
	// registration, leave reads it from the registry): its volumes are
	// torn down by it, the gone driver's still stop leave.
	startDriver(name, driverState)
	pollUntil(t, time.Minute, "the driver's registration socket", func() bool {
		es, _ := os.ReadDir(filepath.Join(root, "plugins_registry"))
		return len(es) == 1
	})
	out, err = leave()
	t.Logf("hostlet leave without the gone driver:\n%s", out)
	if err == nil || !strings.Contains(out, "driver "+gone) || strings.Contains(out, "driver "+name) || !strings.Contains(out, "leave --force") {
		t.Fatalf("leave without the gone driver: want a refusal naming it and --force, got %v", err)
	}
	// --force: the gone driver's volume unmounted without it.
	out, err = leave("--force")
	t.Logf("hostlet leave --force:\n%s", out)
	if err != nil {
		t.Fatalf("hostlet leave --force: %v", err)
	}
	for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume"} {
		if n := len(csiCalls(t, goneState, m)); n != 0 {
			t.Errorf("%s calls of the gone driver: %d", m, n)
		}
	}
	if !strings.Contains(out, "unmounted without its driver") {
		t.Errorf("leave --force does not say what it unmounted")
	}
	byVolume := func(method string) map[string]csihostdir.Call {
		out := map[string]csihostdir.Call{}
		for _, c := range csiCalls(t, driverState, method) {
			if _, twice := out[c.Volume]; twice {
				t.Errorf("%s of %s twice", method, c.Volume)
			}
			out[c.Volume] = c
		}
		return out
	}
	unpub, unstage := byVolume("NodeUnpublishVolume"), byVolume("NodeUnstageVolume")
	if c, ok := unpub["vol1"]; !ok || !strings.HasPrefix(c.Target, filepath.Join(root, "pods")+"/") {
		t.Errorf("NodeUnpublishVolume calls %+v", unpub)
	}
	if c, ok := unstage["vol1"]; !ok || !strings.HasPrefix(c.Staging, filepath.Join(root, "plugins", "kubernetes.io", "csi", name)+"/") {
		t.Errorf("NodeUnstageVolume calls %+v", unstage)
	}
	if block {
		blockDir := filepath.Join(root, "plugins", "kubernetes.io", "csi", "volumeDevices")
		if c, ok := unpub["blk1"]; !ok || !strings.HasPrefix(c.Target, filepath.Join(blockDir, "publish")+"/") {
			t.Errorf("NodeUnpublishVolume calls %+v", unpub)
		}
		if c, ok := unstage["blk1"]; !ok || c.Staging != filepath.Join(blockDir, "staging", ns+"-cblk") {
			t.Errorf("NodeUnstageVolume calls %+v", unstage)
		}
		if l := loopsOver(t, csihostdir.BlockFile(driverState, "blk1")); l != "" {
			t.Errorf("the block volume's loop device still attached: %s", l)
		}
	}
	if m := mountsUnder(t, root); len(m) != 0 {
		t.Errorf("mounts below the root dir after leave: %v", m)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		es, _ := os.ReadDir(root)
		t.Errorf("the root dir after leave: %v %v", err, es)
	}
	if b, err := os.ReadFile(filepath.Join(csihostdir.VolumeDir(driverState, "vol1"), "f")); err != nil || string(b) != "kept\n" {
		t.Errorf("the volume's data after leave: %q %v", b, err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("leave left the state dir: %v", err)
	}
}

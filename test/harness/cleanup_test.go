package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

const testImage = "harness.local/busybox:test"

// runPodLikeContainer does what a node does for a pod, by hand: imports
// busybox, creates a netns file under the cluster dir, attaches it with the
// cluster's CNI config, runs an httpd container in it and mounts a tmpfs
// under the dir. It returns the container's IP, after checking the host
// reaches the container over the bridge.
func runPodLikeContainer(t testing.TB, c *Cluster, id string) string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), ContainerdNamespace)
	img := filepath.Join(c.Dir(), "busybox.tar")
	if err := WriteBusyboxImage(img, testImage); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, img); err != nil {
		t.Fatal(err)
	}

	netns := filepath.Join(c.Dir(), "netns", id)
	if err := os.MkdirAll(filepath.Dir(netns), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(netns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "--net="+netns, "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare --net: %v: %s", err, out)
	}
	list, err := libcni.ConfListFromFile(filepath.Join(c.CNIConfDir(), "10-hostlet.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{c.CNIBinDir()}, c.CNICacheDir(), nil)
	res, err := cni.AddNetworkList(ctx, list, &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: "eth0"})
	if err != nil {
		t.Fatalf("CNI ADD: %v", err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil || len(r.IPs) == 0 {
		t.Fatalf("CNI result %v: %v", res, err)
	}
	ip := r.IPs[0].Address.IP.String()

	cl := c.ContainerdClient()
	image, err := cl.GetImage(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := cl.NewContainer(ctx, id,
		containerd.WithNewSnapshot(id, image),
		containerd.WithNewSpec(oci.WithImageConfig(image),
			oci.WithProcessArgs("httpd", "-f", "-p", "8080", "-h", "/etc"),
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netns})))
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}

	tmpfs := filepath.Join(c.Dir(), "tmpfs-"+id)
	os.MkdirAll(tmpfs, 0o755)
	if err := syscall.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}

	// The host reaches the pod over the bridge (isGateway gives the host
	// an address on it).
	url := fmt.Sprintf("http://%s:8080/passwd", ip)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), "root:") {
				t.Fatalf("GET %s: %q", url, b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ip
}

// TestStopCleansContainers leaves a running container, its netns, CNI
// attachment and a tmpfs behind and checks Stop removes all of it.
func TestStopCleansContainers(t *testing.T) {
	needRoot(t)
	c := startCluster(t)
	dir, bridge := c.Dir(), c.BridgeName()
	ip := runPodLikeContainer(t, c, "cleanup-"+filepath.Base(dir))
	t.Logf("container at %s on %s (%s)", ip, bridge, c.PodSubnet())
	if m, _ := mountsUnder(dir); len(m) < 3 {
		t.Errorf("expected rootfs, netns and tmpfs mounts under %s, got %v", dir, m)
	}
	t0 := time.Now()
	c.Stop()
	t.Logf("stop took %v", time.Since(t0))
	assertNothingLeft(t, dir, bridge)
}

// TestDeadOwnerCleanup SIGKILLs a process that owns a cluster with a
// running container, then checks that its daemons died with it (Pdeathsig)
// and that the next Start reaps the rest (shim, container, mounts, bridge,
// dir).
func TestDeadOwnerCleanup(t *testing.T) {
	needRoot(t)
	if os.Getenv("HARNESS_HELPER_OUT") != "" {
		t.Skip("helper mode")
	}
	out := filepath.Join(t.TempDir(), "helper.json")
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperOwner$", "-test.v")
	helper.Env = append(os.Environ(), "HARNESS_HELPER_OUT="+out)
	logPath := filepath.Join(t.TempDir(), "helper.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	helper.Stdout, helper.Stderr = logFile, logFile
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { helper.Wait(); close(exited) }()
	var info struct{ Dir, Bridge, ID string }
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := os.ReadFile(out)
		if err == nil && json.Unmarshal(b, &info) == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("helper exited:\n%s", tail(logPath, 50))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			helper.Process.Kill()
			t.Fatalf("helper did not come up:\n%s", tail(logPath, 50))
		}
	}
	// Pdeathsig: etcd, apiserver, controllers and containerd die with their
	// owner; the shim and the container do not. The registry's lock is held
	// from the kill to the look: a cluster starting in another test binary
	// (go test runs packages in parallel) reaps dead instances under it, and
	// once did so within that second, taking the shim this test looks for.
	var survivors []string
	if err := withRegistryLock(func() error {
		helper.Process.Kill()
		<-exited
		time.Sleep(time.Second)
		for _, p := range listProcs() {
			if len(p.args) > 0 && !p.zombie && strings.Contains(strings.Join(p.args, " "), info.Dir+"/") {
				survivors = append(survivors, filepath.Base(p.args[0]))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range survivors {
		if !strings.Contains(s, "containerd-shim") {
			t.Errorf("%s survived its owner's death", s)
		}
	}
	if len(survivors) == 0 {
		t.Errorf("expected the shim to survive its owner (to be reaped by the next Start)")
	}

	startCluster(t) // reaps the dead instance
	assertNothingLeft(t, info.Dir, info.Bridge)
	// runc's state and the container's cgroup live outside the dir.
	if _, err := os.Stat(filepath.Join("/run/containerd/runc", ContainerdNamespace, info.ID)); !os.IsNotExist(err) {
		t.Errorf("runc state of %s survived (%v)", info.ID, err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", ContainerdNamespace, info.ID)); !os.IsNotExist(err) {
		t.Errorf("cgroup of %s survived (%v)", info.ID, err)
	}
}

// TestHelperOwner is TestDeadOwnerCleanup's victim process.
func TestHelperOwner(t *testing.T) {
	out := os.Getenv("HARNESS_HELPER_OUT")
	if out == "" {
		t.Skip("only run by TestDeadOwnerCleanup")
	}
	c := startCluster(t)
	id := "orphan-" + filepath.Base(c.Dir())
	runPodLikeContainer(t, c, id)
	b, _ := json.Marshal(map[string]string{"Dir": c.Dir(), "Bridge": c.BridgeName(), "ID": id})
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	select {} // wait to be killed
}

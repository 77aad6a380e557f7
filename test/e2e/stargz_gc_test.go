package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/proxy"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"github.com/opencontainers/image-spec/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Image GC with lazy pulls: an unused lazily pulled image is removed, with
// its snapshots in the stargz snapshotter (their directories too) and,
// once the snapshotter releases its layers, the chunks it fetched of them;
// the image a container uses stays. A snapshotter restarted after a crash
// removes the layer caches its previous run left. The node's GC is driven as in
// TestImageGC: a high threshold of 1% on a containerd of its own.
func TestStargzImageGC(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	auth := &images.BasicAuth{User: "puller", Password: "pw"}
	reg := privateRegistry(t, auth)
	pullSecret(t, ns, reg.Addr(), auth.User, auth.Password)

	node := "stargz-gc-node"
	sn, d, _ := stargzNode(t, "lazygc", node,
		// Images are safe for their first 30 s: time for a pod to use one.
		"--image-gc-high-threshold", "1",
		"--image-gc-low-threshold", "0",
		"--image-minimum-gc-age", "30s",
		"--image-gc-period", "2s",
	)
	usedRef, _ := pushBigImageSeeded(t, reg, auth, "gc/used:v1", true, 2)
	unusedRef, _ := pushBigImageSeeded(t, reg, auth, "gc/unused:v1", true, 3)

	nctx := namespaces.WithNamespace(ctx, harness.ContainerdNamespace)
	cl := d.Client()
	// The snapshotter's root is exported (stargz.ProxyPluginConfig): the
	// node's imagefs, as CRI would report it.
	if resp, err := cl.IntrospectionService().Plugins(ctx, `type==io.containerd.snapshotter.v1,id==stargz`); err != nil || len(resp.Plugins) != 1 || resp.Plugins[0].Exports["root"] != sn.Root() {
		t.Errorf("containerd's stargz snapshotter: %v %v, want root %s exported", resp, err, sn.Root())
	}
	conn, err := grpc.NewClient("unix://"+sn.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The snapshotter itself, not containerd's view of it.
	backend := proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), "stargz")
	poll := func(what string, timeout time.Duration, cond func() (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) { return cond() }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	caches := func() map[string]bool {
		out := map[string]bool{}
		for _, sub := range []string{"fscache", "httpcache"} {
			es, _ := os.ReadDir(filepath.Join(sn.Root(), "stargz", sub))
			for _, e := range es {
				out[filepath.Join(sub, e.Name())] = true
			}
		}
		return out
	}
	run := func(name, ref string) {
		pod := imagePod(ns, name, ref, v1.PullIfNotPresent)
		pod.Spec.NodeName = node
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		cluster.CreatePod(t, pod)
		waitReady(t, ns, name)
		// Chunks of the big file fetched into the layer cache.
		if out := strings.TrimSpace(execIn(t, ns, name, "c", "sh", "-c", "head -c 1000000 /big.bin | wc -c")); out != "1000000" {
			t.Fatalf("%s: read %q bytes of /big.bin", name, out)
		}
	}

	run("user", usedRef)
	before := caches()
	run("gone", unusedRef)
	var goneCaches []string
	for c := range caches() {
		if !before[c] {
			goneCaches = append(goneCaches, c)
		}
	}
	if len(goneCaches) == 0 {
		t.Fatalf("no layer cache made for %s (caches %v)", unusedRef, before)
	}
	img, err := cl.GetImage(nctx, unusedRef)
	if err != nil {
		t.Fatal(err)
	}
	diffIDs, err := img.RootFS(nctx)
	if err != nil {
		t.Fatal(err)
	}
	top := identity.ChainID(diffIDs).String()
	if _, err := cl.SnapshotService("stargz").Stat(nctx, top); err != nil {
		t.Fatalf("%s not unpacked in the stargz snapshotter: %v", unusedRef, err)
	}
	t.Logf("layer caches of %s: %q", unusedRef, goneCaches)

	deletePod(t, ns, "gone")
	waitGone(t, ns, "gone")
	poll("the unused image removed", 3*time.Minute, func() (bool, error) {
		_, err := cl.GetImage(nctx, unusedRef)
		return errdefs.IsNotFound(err), nil
	})
	// containerd's GC removes its snapshots from the snapshotter, which
	// removes their directories.
	snapDirs := filepath.Join(sn.Root(), "snapshotter", "snapshots")
	poll("its snapshots removed from the snapshotter", time.Minute, func() (bool, error) {
		if _, err := cl.SnapshotService("stargz").Stat(nctx, top); !errdefs.IsNotFound(err) {
			return false, nil
		}
		n := 0
		if err := backend.Walk(ctx, func(context.Context, snapshots.Info) error { n++; return nil }); err != nil {
			return false, err
		}
		dirs, err := os.ReadDir(snapDirs)
		if err != nil {
			return false, err
		}
		if len(dirs) != n {
			t.Logf("%d snapshots, %d snapshot directories", n, len(dirs))
		}
		return len(dirs) == n, nil
	})
	// The snapshotter releases a layer no snapshot mounts once its resolve
	// TTL (2 min from the pull) is over: its cache goes with it.
	poll("the unused image's layer caches removed", 4*time.Minute, func() (bool, error) {
		now := caches()
		for _, c := range goneCaches {
			if now[c] {
				return false, nil
			}
		}
		return true, nil
	})
	// Many collections later, what a container uses is there still.
	if _, err := cl.GetImage(nctx, usedRef); err != nil {
		t.Errorf("the image in use: %v", err)
	}
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, "user", metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodRunning {
		t.Errorf("the user pod: %v", err)
	}
	if out := strings.TrimSpace(execIn(t, ns, "user", "c", "sh", "-c", "tail -c 1000 /big.bin | wc -c")); out != "1000" {
		t.Errorf("the image in use: read %q bytes of /big.bin's end", out)
	}

	// A snapshotter that stops unmounts its layers and so removes their
	// caches; one killed leaves them, and its next run removes them (its
	// remounts make their own).
	left := caches()
	if len(left) == 0 {
		t.Fatal("no layer cache before the crash")
	}
	if err := sn.Crash(ctx); err != nil {
		t.Fatalf("restart after a crash: %v (log %s)", err, sn.LogPath())
	}
	poll("the previous run's layer caches removed", time.Minute, func() (bool, error) {
		now := caches()
		for c := range left {
			if now[c] {
				return false, nil
			}
		}
		return true, nil
	})
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The crash test of issue 46: bursts of pod starts and of pod deletes with
// hostlet, its containerd or both SIGKILLed at moments spread over each
// burst (from 0.2 s to the burst's length without a kill), restarted with
// the same flags, and after each the pods and the host checked whole:
// every pod Running and Ready with no restart (or gone), one container and
// task per pod container, one sandbox, one IP each, nothing of a pod left
// behind (IPAM files, network namespaces, mounts, cgroups, directories,
// logs, snapshots, shims), no pod ever restarted. Minutes per kill, so only
// with HOSTLET_CRASH_TEST=1 (make crashtest); HOSTLET_CRASH_KILLS (10) is
// the number of kills per burst kind and target, HOSTLET_CRASH_PODS (40) the
// burst's size.
//
// It runs on a node of its own with a containerd of its own, so killing
// containerd leaves the shared node alone.
func TestCrash(t *testing.T) {
	skipIfNoCluster(t)
	if os.Getenv("HOSTLET_CRASH_TEST") == "" {
		t.Skip("HOSTLET_CRASH_TEST=1 runs it (make crashtest)")
	}
	r := newCrashRig(t, envInt("HOSTLET_CRASH_PODS", 40))
	kills := envInt("HOSTLET_CRASH_KILLS", 10)

	// A burst without a kill: the product must pass it anyway, and its
	// lengths place the kills.
	var startLen, deleteLen time.Duration
	if !t.Run("baseline", func(t *testing.T) {
		r.reset(t)
		startLen = r.startBurst(t, nil)
		deleteLen = r.deleteBurst(t, nil)
		t.Logf("baseline: %d pods Running in %v, gone in %v", r.n, startLen.Round(time.Millisecond), deleteLen.Round(time.Millisecond))
	}) {
		t.Fatal("the baseline burst failed: nothing to crash")
	}
	for _, target := range r.targets() {
		t.Run(target.name, func(t *testing.T) {
			starts, deletes := killMoments(startLen, kills), killMoments(deleteLen, kills)
			for i := range starts {
				t.Run(fmt.Sprintf("starts/%02d@%s", i+1, starts[i].Round(10*time.Millisecond)), func(t *testing.T) {
					r.reset(t)
					r.startBurst(t, &crashAt{after: starts[i], target: target})
				})
				t.Run(fmt.Sprintf("deletes/%02d@%s", i+1, deletes[i].Round(10*time.Millisecond)), func(t *testing.T) {
					r.ensureRunning(t)
					r.deleteBurst(t, &crashAt{after: deletes[i], target: target})
				})
			}
		})
	}
}

// killMoments spreads k kills from 0.2 s to the end of a burst of length d.
func killMoments(d time.Duration, k int) []time.Duration {
	const first = 200 * time.Millisecond
	if d < first {
		d = first
	}
	out := []time.Duration{first}
	for i := 1; i < k; i++ {
		out = append(out, first+time.Duration(i)*(d-first)/time.Duration(k-1))
	}
	return out
}

// crashTarget is what a kill takes down and how it comes back.
type crashTarget struct {
	name    string
	kill    func()
	restart func(ctx context.Context) error
}

// crashAt is one kill: after this long into the burst.
type crashAt struct {
	after  time.Duration
	target crashTarget
}

// crashRig is the crash test's node, its containerd, the namespace its pods
// live in and what was seen of them.
type crashRig struct {
	h        *harness.Hostlet
	d        *harness.Containerd
	ns       string
	n        int
	restarts *restartLog

	mu      sync.Mutex
	created map[types.UID]bool // every pod the test made: the IPAM files of others are not its business
	// reported are the leftovers already reported, so one leak fails one
	// kill, not every one after it.
	reported map[string]bool
}

const crashNodeName = "hostlet-crash"

func newCrashRig(t *testing.T, n int) *crashRig {
	d, err := cluster.AddContainerdWithSnapshotters(ctxT(t), "crash", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if err := d.ImportImage(ctxT(t), localImage(t, images.BusyboxRef).Archive); err != nil {
		t.Fatal(err)
	}
	h := extraNode(t, harness.HostletOptions{NodeName: crashNodeName,
		ExtraArgs: []string{"--container-runtime-endpoint", "unix://" + d.Socket()}})
	r := &crashRig{h: h, d: d, n: n, created: map[types.UID]bool{}, reported: map[string]bool{}}
	r.ns = cluster.NewNamespace(t)
	r.restarts = watchRestarts(t, r.ns)
	// Before the node and containerd stop (cleanups run last first): the
	// pods deleted by the node that runs them.
	t.Cleanup(func() { r.removeAll(t) })
	return r
}

func (r *crashRig) targets() []crashTarget {
	return []crashTarget{
		{name: "hostlet", kill: r.h.Kill, restart: r.h.Restart},
		{name: "containerd", kill: r.d.Kill, restart: r.d.Start},
		{name: "both", kill: func() {
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); r.d.Kill() }()
			go func() { defer wg.Done(); r.h.Kill() }()
			wg.Wait()
		}, restart: func(ctx context.Context) error {
			// As a host's init brings them back: the runtime first.
			if err := r.d.Start(ctx); err != nil {
				return err
			}
			return r.h.Restart(ctx)
		}},
	}
}

// crashPod runs until deleted, stops at once on SIGTERM, and is restarted
// if it ever exits: a restart count above 0 is a container the node lost.
func (r *crashRig) crashPod(i int) *v1.Pod {
	pod := busybox(r.ns, fmt.Sprintf("crash-%02d", i), "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
	pod.Spec.NodeName = crashNodeName
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	return pod
}

// startBurst creates the burst's pods (kills what crash says that long
// after the first create and brings it back), waits until each is Running
// and Ready, checks the node and returns how long the pods took.
func (r *crashRig) startBurst(t *testing.T, crash *crashAt) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	created := make(chan error, 1)
	go func() {
		created <- each(r.n, 20, func(i int) error {
			p, err := cluster.Client().CoreV1().Pods(r.ns).Create(ctx, r.crashPod(i), metav1.CreateOptions{})
			if err == nil {
				r.mu.Lock()
				r.created[p.UID] = true
				r.mu.Unlock()
			}
			return err
		})
	}()
	r.crash(t, ctx, t0, crash)
	if err := <-created; err != nil {
		t.Fatalf("creating: %v", err)
	}
	waitAll(t, ctx, r.ns, r.n, 4*time.Minute, "every pod Running and Ready", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && podReady(p) && p.DeletionTimestamp == nil
	})
	took := time.Since(t0)
	r.checkNode(t, ctx)
	return took
}

// deleteBurst deletes the namespace's pods as startBurst creates them,
// waits until they are gone from the API, checks the node and returns how
// long that took.
func (r *crashRig) deleteBurst(t *testing.T, crash *crashAt) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	list, err := cluster.Client().CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	deleted := make(chan error, 1)
	go func() {
		deleted <- each(len(list.Items), 20, func(i int) error {
			err := cluster.Client().CoreV1().Pods(r.ns).Delete(ctx, list.Items[i].Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	}()
	r.crash(t, ctx, t0, crash)
	if err := <-deleted; err != nil {
		t.Fatalf("deleting: %v", err)
	}
	waitAll(t, ctx, r.ns, 0, 4*time.Minute, "every pod deleted", func(*v1.Pod) bool { return false })
	took := time.Since(t0)
	r.checkNode(t, ctx)
	return took
}

// crash kills crash's target at t0+crash.after and brings it back.
func (r *crashRig) crash(t *testing.T, ctx context.Context, t0 time.Time, crash *crashAt) {
	if crash == nil {
		return
	}
	time.Sleep(time.Until(t0.Add(crash.after)))
	signalled := time.Since(t0)
	crash.target.kill()
	killed := time.Since(t0)
	if err := crash.target.restart(ctx); err != nil {
		t.Fatalf("restarting %s: %v", crash.target.name, err)
	}
	t.Logf("%s SIGKILLed %v into the burst (gone %v later), back %v after that", crash.target.name,
		signalled.Round(time.Millisecond), (killed - signalled).Round(time.Millisecond), (time.Since(t0) - killed).Round(time.Millisecond))
}

// reset brings back whatever a failed kill left down and starts from no
// pod; what a failure left on the host was reported by the check that saw it.
func (r *crashRig) reset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if r.d.Client() == nil {
		if err := r.d.Start(ctx); err != nil {
			t.Fatalf("containerd: %v", err)
		}
	}
	if r.h.Exited() {
		if err := r.h.Restart(ctx); err != nil {
			t.Fatalf("hostlet: %v", err)
		}
	}
	list, err := cluster.Client().CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		return
	}
	t.Logf("reset: removing %d pods left by the last kill", len(list.Items))
	r.removeAll(t)
	// Let the node finish their teardown, so this kill's check sees this
	// kill's leftovers.
	var left []string
	if !pollQuiet(ctx, time.Minute, func() bool { left = r.problems(ctx, nil); return len(left) == 0 }) {
		t.Logf("reset: still left after a minute with no pod: %v", left)
	}
}

// ensureRunning has the burst's pods Running for a delete burst, also when
// the start burst before it failed.
func (r *crashRig) ensureRunning(t *testing.T) {
	list, err := cluster.Client().CoreV1().Pods(r.ns).List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for i := range list.Items {
		if p := &list.Items[i]; p.Status.Phase == v1.PodRunning && podReady(p) && p.DeletionTimestamp == nil {
			running++
		}
	}
	if running == r.n && len(list.Items) == r.n && !r.h.Exited() && r.d.Client() != nil {
		return
	}
	r.reset(t)
	r.startBurst(t, nil)
}

// removeAll force-deletes the namespace's pods and waits until the node
// has them gone.
func (r *crashRig) removeAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := cluster.Client().CoreV1().Pods(r.ns)
	_ = pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}, metav1.ListOptions{})
	_ = pollQuiet(ctx, 3*time.Minute, func() bool {
		list, err := pods.List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
}

// pollQuiet polls cond every 500 ms until it holds or timeout; it never
// fails the test.
func pollQuiet(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
	return true
}

// checkNode waits (a minute at most: teardown finishes after the API
// object is gone) until the node's state matches the API's pods, then
// reports what does not, once per leftover, and any pod that restarted.
func (r *crashRig) checkNode(t *testing.T, ctx context.Context) {
	t.Helper()
	var fresh []string
	pollQuiet(ctx, time.Minute, func() bool {
		list, err := cluster.Client().CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			fresh = []string{err.Error()}
			return false
		}
		fresh = r.unreported(r.problems(ctx, list.Items))
		return len(fresh) == 0
	})
	r.mu.Lock()
	for _, p := range fresh {
		r.reported[p] = true
	}
	r.mu.Unlock()
	for _, p := range fresh {
		t.Error(p)
	}
	for _, l := range r.restarts.take() {
		t.Error(l)
	}
}

// unreported are the problems no check reported yet.
func (r *crashRig) unreported(problems []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range problems {
		if !r.reported[p] {
			out = append(out, p)
		}
	}
	return out
}

// problems compares the node with live, the namespace's pods in the API:
// each of them Running with its one container, task, sandbox and IP, and
// nothing on the node of any other pod.
func (r *crashRig) problems(ctx context.Context, live []v1.Pod) []string {
	var out []string
	add := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	pods := map[string]*v1.Pod{}
	podIPs := map[string]string{}
	for i := range live {
		p := &live[i]
		uid := string(p.UID)
		pods[uid] = p
		if p.DeletionTimestamp != nil {
			add("pod %s (%s): still being deleted", p.Name, uid)
			continue
		}
		st := status(p, "c")
		if p.Status.Phase != v1.PodRunning || !podReady(p) || st.State.Running == nil || st.RestartCount != 0 {
			add("pod %s (%s): %s", p.Name, uid, harness.DescribePodStatus(p))
		}
		if other, dup := podIPs[p.Status.PodIP]; dup {
			add("pods %s and %s both have IP %s", other, p.Name, p.Status.PodIP)
		}
		podIPs[p.Status.PodIP] = p.Name
	}

	cl := r.d.Client()
	if cl == nil {
		return append(out, "containerd is down")
	}
	ctrs, err := cl.Containers(ctx)
	if err != nil {
		return append(out, "listing containers: "+err.Error())
	}
	byPod := map[string][]containerd.Container{}
	liveCtrs := map[string]bool{}
	for _, c := range ctrs {
		labels, err := c.Labels(ctx)
		if err != nil {
			add("container %s: labels: %v", c.ID(), err)
			continue
		}
		uid := labels["io.kubernetes.pod.uid"]
		if pods[uid] == nil {
			add("container %s of pod %s (gone) still in containerd", c.ID(), uid)
			continue
		}
		byPod[uid] = append(byPod[uid], c)
		liveCtrs[c.ID()] = true
	}
	for uid, p := range pods {
		cs := byPod[uid]
		if len(cs) != 1 {
			var ids []string
			for _, c := range cs {
				ids = append(ids, c.ID())
			}
			add("pod %s (%s): %d containers in containerd, want 1: %v", p.Name, uid, len(cs), ids)
			continue
		}
		if want := "containerd://" + cs[0].ID(); status(p, "c").ContainerID != want {
			add("pod %s (%s): status names container %q, containerd has %q", p.Name, uid, status(p, "c").ContainerID, want)
		}
		task, err := cs[0].Task(ctx, nil)
		if err != nil {
			add("pod %s (%s): container %s has no task: %v", p.Name, uid, cs[0].ID(), err)
			continue
		}
		if s, err := task.Status(ctx); err != nil || s.Status != containerd.Running {
			add("pod %s (%s): task of %s is %v (%v), want running", p.Name, uid, cs[0].ID(), s.Status, err)
		}
	}
	out = append(out, r.snapshotProblems(ctx, cl, liveCtrs)...)
	out = append(out, r.sandboxProblems(pods)...)
	out = append(out, r.ipamProblems(pods)...)
	out = append(out, r.mountProblems(pods, liveCtrs)...)
	out = append(out, r.cgroupProblems(pods, liveCtrs)...)
	out = append(out, r.logProblems(pods, liveCtrs)...)
	if len(pods) == 0 {
		if shims := r.shims(); len(shims) > 0 {
			add("no container left, yet shims still run: pids %v", shims)
		}
	}
	sort.Strings(out)
	return out
}

// snapshotProblems: every active snapshot is a live container's rootfs
// (a container's snapshot has its ID as key).
func (r *crashRig) snapshotProblems(ctx context.Context, cl *containerd.Client, liveCtrs map[string]bool) []string {
	var out []string
	err := cl.SnapshotService("overlayfs").Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind == snapshots.KindActive && !liveCtrs[info.Name] && !strings.HasPrefix(info.Name, "extract-") {
			out = append(out, fmt.Sprintf("snapshot %s left (no such container)", info.Name))
		}
		return nil
	})
	if err != nil {
		out = append(out, "listing snapshots: "+err.Error())
	}
	return out
}

// sandboxRecord is what the check reads of a pod's sandbox.json.
type sandboxRecord struct {
	NetNS      string   `json:"netns"`
	IPs        []string `json:"ips"`
	Incomplete bool     `json:"incomplete"`
}

// sandboxProblems: each pod has one whole sandbox (its record, its network
// namespace, its IP the one the API shows), no pod directory or network
// namespace is any other pod's.
func (r *crashRig) sandboxProblems(pods map[string]*v1.Pod) []string {
	var out []string
	add := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	root := r.h.RootDir()
	netnsInUse := map[string]bool{}
	for uid, p := range pods {
		b, err := os.ReadFile(filepath.Join(root, "pods", uid, "sandbox.json"))
		if err != nil {
			add("pod %s (%s): no sandbox record: %v", p.Name, uid, err)
			continue
		}
		var s sandboxRecord
		if err := json.Unmarshal(b, &s); err != nil {
			add("pod %s (%s): sandbox record: %v", p.Name, uid, err)
			continue
		}
		if s.Incomplete {
			add("pod %s (%s): sandbox record still marked incomplete", p.Name, uid)
		}
		if !slices.Equal(s.IPs, []string{p.Status.PodIP}) {
			add("pod %s (%s): sandbox IPs %v, API podIP %q", p.Name, uid, s.IPs, p.Status.PodIP)
		}
		if _, err := os.Stat(s.NetNS); err != nil || s.NetNS == "" {
			add("pod %s (%s): network namespace %q: %v", p.Name, uid, s.NetNS, err)
		}
		netnsInUse[s.NetNS] = true
	}
	entries, _ := os.ReadDir(filepath.Join(root, "pods"))
	for _, e := range entries {
		if pods[e.Name()] == nil {
			add("pod directory %s left", filepath.Join(root, "pods", e.Name()))
		}
	}
	entries, _ = os.ReadDir(filepath.Join(root, "netns"))
	for _, e := range entries {
		if p := filepath.Join(root, "netns", e.Name()); !netnsInUse[p] {
			add("network namespace %s left (no pod's)", p)
		}
	}
	return out
}

// ipamProblems reads host-local's files (one per allocated IP, the CNI
// container ID, hostlet's pod UID, on its first line): each of the test's
// live pods holds exactly its podIP, none of its gone ones holds any. The
// directory is the cluster's, shared with other nodes: their pods' entries
// are not this test's.
func (r *crashRig) ipamProblems(pods map[string]*v1.Pod) []string {
	var out []string
	held := map[string][]string{}
	dir := filepath.Join(cluster.Dir(), "cni", "ipam")
	_ = filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		id, _, _ := strings.Cut(string(b), "\n")
		id = strings.TrimSpace(id)
		held[id] = append(held[id], e.Name())
		return nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid := range r.created {
		ips := held[string(uid)]
		p := pods[string(uid)]
		switch {
		case p == nil && len(ips) > 0:
			out = append(out, fmt.Sprintf("IPs %v still allocated to pod %s (gone)", ips, uid))
		case p != nil && !slices.Equal(ips, []string{p.Status.PodIP}):
			out = append(out, fmt.Sprintf("pod %s (%s): IPs allocated %v, API podIP %q", p.Name, uid, ips, p.Status.PodIP))
		}
	}
	return out
}

// mountProblems: no mount under the node's root dir or containerd's dir is
// of a pod, network namespace or container that is gone.
func (r *crashRig) mountProblems(pods map[string]*v1.Pod, liveCtrs map[string]bool) []string {
	var out []string
	mounts, err := mountPoints()
	if err != nil {
		return []string{"reading mounts: " + err.Error()}
	}
	root, ctrd := r.h.RootDir(), r.d.Dir()
	netnsOf := map[string]bool{}
	for uid := range pods {
		if b, err := os.ReadFile(filepath.Join(root, "pods", uid, "sandbox.json")); err == nil {
			var s sandboxRecord
			if json.Unmarshal(b, &s) == nil {
				netnsOf[s.NetNS] = true
			}
		}
	}
	seen := map[string]bool{}
	for _, m := range mounts {
		if seen[m] {
			continue
		}
		seen[m] = true
		if rel, ok := strings.CutPrefix(m, root+"/"); ok {
			parts := strings.Split(rel, "/")
			switch {
			case parts[0] == "pods" && len(parts) > 1 && pods[parts[1]] != nil:
			case parts[0] == "netns" && netnsOf[m]:
			case parts[0] == "plugins" || parts[0] == "plugins_registry":
			default:
				out = append(out, fmt.Sprintf("mount %s left", m))
			}
			continue
		}
		if rel, ok := strings.CutPrefix(m, ctrd+"/"); ok {
			// state/io.containerd.runtime.v2.task/<ns>/<id>/rootfs
			parts := strings.Split(rel, "/")
			if len(parts) >= 4 && parts[1] == "io.containerd.runtime.v2.task" && liveCtrs[parts[3]] {
				continue
			}
			out = append(out, fmt.Sprintf("mount %s left", m))
		}
	}
	return out
}

// mountPoints lists this mount namespace's mount points (as the node's:
// the test and hostlet share it).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) > 4 {
			out = append(out, strings.ReplaceAll(fs[4], `\040`, " "))
		}
	}
	return out, s.Err()
}

// cgroupProblems: in every hierarchy, the node's pod cgroups are the live
// pods' and hold only their live containers' cgroups.
func (r *crashRig) cgroupProblems(pods map[string]*v1.Pod, liveCtrs map[string]bool) []string {
	var out []string
	mounts, err := harness.CgroupMounts()
	if err != nil {
		return []string{"cgroup mounts: " + err.Error()}
	}
	for _, m := range mounts {
		base := filepath.Join(m, r.h.CgroupRoot())
		_ = filepath.WalkDir(base, func(path string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			parent := filepath.Base(filepath.Dir(path))
			switch {
			case strings.HasPrefix(e.Name(), "pod"):
				if pods[strings.TrimPrefix(e.Name(), "pod")] == nil {
					out = append(out, fmt.Sprintf("cgroup %s left (pod gone)", path))
					return filepath.SkipDir
				}
			case strings.HasPrefix(parent, "pod") && !liveCtrs[e.Name()]:
				out = append(out, fmt.Sprintf("cgroup %s left (container gone)", path))
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}

// logProblems: no pod log directory or container log link of a pod or
// container that is gone.
func (r *crashRig) logProblems(pods map[string]*v1.Pod, liveCtrs map[string]bool) []string {
	var out []string
	entries, _ := os.ReadDir(r.h.PodLogsDir())
	for _, e := range entries {
		// <namespace>_<name>_<uid>
		if i := strings.LastIndex(e.Name(), "_"); i < 0 || pods[e.Name()[i+1:]] == nil {
			out = append(out, fmt.Sprintf("pod log directory %s left", e.Name()))
		}
	}
	entries, _ = os.ReadDir(r.h.ContainerLogsDir())
	for _, e := range entries {
		// <pod>_<namespace>_<container>-<id>.log
		name := strings.TrimSuffix(e.Name(), ".log")
		if i := strings.LastIndex(name, "-"); i < 0 || !liveCtrs[name[i+1:]] {
			out = append(out, fmt.Sprintf("container log link %s left", e.Name()))
		}
	}
	return out
}

// shims are the pids of the crash containerd's shims still running.
func (r *crashRig) shims() []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := string(b)
		if strings.Contains(cmd, "containerd-shim") && strings.Contains(cmd, r.d.Socket()) {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// restartLog records, from a watch of the namespace's pods, every pod that
// restarted a container or ended without being deleted: a pod looping
// anywhere between two checks is seen, not only one caught at the check.
type restartLog struct {
	mu   sync.Mutex
	seen map[string]bool
	news []string
}

func watchRestarts(t *testing.T, ns string) *restartLog {
	l := &restartLog{seen: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(cluster.Client(), 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.see,
		UpdateFunc: func(_, o any) { l.see(o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return l
}

func (l *restartLog) see(o any) {
	p, ok := o.(*v1.Pod)
	if !ok {
		return
	}
	var what string
	if st := status(p, "c"); st.RestartCount > 0 {
		what = fmt.Sprintf("restarted %d times", st.RestartCount)
	} else if p.DeletionTimestamp == nil && (p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded) {
		what = "ended without being deleted"
	}
	if what == "" {
		return
	}
	key := string(p.UID) + " " + what
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.seen[key] {
		l.seen[key] = true
		l.news = append(l.news, fmt.Sprintf("pod %s (%s) %s: %s", p.Name, p.UID, what, harness.DescribePodStatus(p)))
	}
}

// take returns what was seen since the last call.
func (l *restartLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.news
	l.news = nil
	return out
}

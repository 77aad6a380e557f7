package eviction

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// fakeDisk measures from tables: writable layers by container ID,
// directories by path (fakeStats' LogDir and VolumeDir).
type fakeDisk struct {
	fakeStats
	rootfs, dirs map[string]runtime.DiskUsage
}

func (f fakeDisk) RootfsUsage(_ context.Context, id string) (runtime.DiskUsage, error) {
	if u, ok := f.rootfs[id]; ok {
		return u, nil
	}
	return runtime.DiskUsage{}, errors.New("no snapshot")
}

func (f fakeDisk) DirUsage(dir string) (runtime.DiskUsage, error) {
	if u, ok := f.dirs[dir]; ok {
		return u, nil
	}
	return runtime.DiskUsage{}, errors.New("no such dir")
}

// diskPod is testPod with an ephemeral-storage request (0: none) and a
// disk-backed emptyDir "scratch" and a memory-backed one "shm".
func diskPod(name string, request int64, priority int32) *v1.Pod {
	p := testPod(name, 0, 0, priority)
	if request > 0 {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceEphemeralStorage] = *resource.NewQuantity(request, resource.BinarySI)
	}
	p.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "shm", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
	}
	return p
}

// diskOf is a fakeDisk entry set for diskPod name: its writable layer,
// its container's logs and its two emptyDirs, in bytes (inodes: 1/Mi).
func diskOf(f fakeDisk, name string, rootfs, logs, scratch, shm int64) {
	u := func(b int64) runtime.DiskUsage { return runtime.DiskUsage{Bytes: uint64(b), Inodes: uint64(b / mi)} }
	f.fakeStats[name+"-c"] = runtime.ContainerStats{WorkingSet: mi}
	f.rootfs[name+"-c"] = u(rootfs)
	f.dirs["/logs/"+name+"/c"] = u(logs)
	f.dirs["/volumes/"+name+"/scratch"] = u(scratch)
	f.dirs["/volumes/"+name+"/shm"] = u(shm)
}

func newFakeDisk() fakeDisk {
	return fakeDisk{fakeStats: fakeStats{}, rootfs: map[string]runtime.DiskUsage{}, dirs: map[string]runtime.DiskUsage{}}
}

func rankedDisk(t *testing.T, f fakeDisk, pods []*v1.Pod, signal string, dedicated bool) []string {
	t.Helper()
	stats := map[*v1.Pod]usage{}
	for _, p := range pods {
		if u, ok := podUsage(p, f.fakeStats); ok {
			stats[p] = u
		}
	}
	pods = append([]*v1.Pod{}, pods...)
	rankDisk(pods, measureDisk(context.Background(), f, pods, stats), diskStatsFor(signal, dedicated), signalResource[signal])
	return names(pods)
}

func TestRankDisk(t *testing.T) {
	f := newFakeDisk()
	// Within its 100Mi request, low priority.
	diskOf(f, "requested", 60*mi, mi, 30*mi, 0)
	// Above its (zero) request, each by a different part.
	diskOf(f, "layer", 50*mi, 0, 0, 0)
	diskOf(f, "logs", 0, 40*mi, 0, 0)
	diskOf(f, "scratch", 0, 0, 30*mi, 500*mi) // the memory-backed emptyDir does not count
	diskOf(f, "important", 900*mi, 0, 0, 0)
	pods := []*v1.Pod{
		diskPod("requested", 100*mi, -1), diskPod("important", 0, 1000), diskPod("scratch", 0, 0),
		diskPod("logs", 0, 0), diskPod("layer", 0, 0), diskPod("unknown", 0, 5),
	}
	for _, tc := range []struct {
		signal    string
		dedicated bool
		want      string
	}{
		// Everything on one filesystem: all parts count.
		{node.SignalNodeFsAvailable, false, "unknown layer logs scratch important requested"},
		{node.SignalImageFsAvailable, false, "unknown layer logs scratch important requested"},
		// With an image filesystem: nodefs counts logs and volumes,
		// imagefs the writable layers; pods within their request (none
		// used is within zero) rank by priority after the offenders.
		{node.SignalNodeFsAvailable, true, "unknown logs scratch requested layer important"},
		{node.SignalImageFsAvailable, true, "unknown layer important requested scratch logs"},
		// Inodes are never requested: every pod using any exceeds, and
		// the ephemeral-storage request is still subtracted (as upstream).
		{node.SignalNodeFsInodesFree, false, "unknown requested layer logs scratch important"},
	} {
		if got := strings.Join(rankedDisk(t, f, pods, tc.signal, tc.dedicated), " "); got != tc.want {
			t.Errorf("%s dedicated=%v: order %s, want %s", tc.signal, tc.dedicated, got, tc.want)
		}
	}
}

func TestDiskPressureEvictsTheOffenderWithKubeletMessage(t *testing.T) {
	f := newFakeDisk()
	diskOf(f, "writer", 30*mi, 2*mi, 200*mi, 0)
	diskOf(f, "quiet", mi, 0, 0, 0)
	writer, quiet := diskPod("writer", 10*mi, 0), diskPod("quiet", 10*mi, 0)
	obs := node.Observations{node.SignalNodeFsAvailable: {Available: 500 * mi, Capacity: 8192 * mi}}
	sig := &fakeSignals{obs: obs}
	fp := &fakePods{pods: []*v1.Pod{quiet, writer}}
	m, _, _, rec, _ := newTestManager(Config{Hard: mustThresholds(t, map[string]string{"nodefs.available": "1Gi"})}, obs, nil, fakeStats{})
	m.signals, m.pods, m.stats = sig, fp, f
	noop := func(context.Context) error { return nil }
	m.containerGC, m.imageGC = noop, noop

	if m.synchronize(context.Background()) == nil || len(fp.stops) != 1 || fp.stops[0].uid != writer.UID {
		t.Fatalf("stops %+v, want the writer", fp.stops)
	}
	// The container's figure is its writable layer and logs; the emptyDir
	// counts in the ranking only.
	const want = "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 500Mi. Container c was using 32Mi, request is 10Mi, has larger consumption of ephemeral-storage. "
	if req := fp.stops[0].req; req.Message != want || req.Reason != Reason || len(req.Conditions) != 1 {
		t.Errorf("stop request %+v\nwant message %q", req, want)
	}
	events := []string{<-rec.Events, <-rec.Events}
	if events[0] != "Warning EvictionThresholdMet Attempting to reclaim ephemeral-storage" ||
		events[1] != "Warning Evicted "+want+" map[offending_containers:c offending_containers_usage:32Mi starved_resource:ephemeral-storage]" {
		t.Errorf("events %q", events)
	}

	// Inodes: no container figures, as the kubelet's message has none.
	sig.obs = node.Observations{node.SignalNodeFsInodesFree: {Available: 90, Capacity: 10000}}
	m.cfg.Hard = mustThresholds(t, map[string]string{"nodefs.inodesFree": "100"})
	fp.pods, fp.stops = []*v1.Pod{quiet}, nil
	m.synchronize(context.Background())
	const wantInodes = "The node was low on resource: inodes. Threshold quantity: 100, available: 90. "
	if len(fp.stops) != 1 || fp.stops[0].req.Message != wantInodes {
		t.Fatalf("stops %+v, want quiet with %q", fp.stops, wantInodes)
	}
}

func TestMinimumReclaim(t *testing.T) {
	f := newFakeDisk()
	diskOf(f, "a", 10*mi, 0, 0, 0)
	diskOf(f, "b", 20*mi, 0, 0, 0)
	diskOf(f, "c", 30*mi, 0, 0, 0)
	a, b, c := diskPod("a", 0, 0), diskPod("b", 0, 0), diskPod("c", 0, 0)
	at := func(avail int64) node.Observations {
		return node.Observations{node.SignalNodeFsAvailable: {Available: avail, Capacity: 100 * mi}}
	}
	cfg := Config{
		Hard:       mustThresholds(t, map[string]string{"nodefs.available": "10Mi"}),
		MinReclaim: node.Thresholds{node.SignalNodeFsAvailable: {Signal: node.SignalNodeFsAvailable, Percentage: 0.05}},
	}
	m, sig, fp, _, _ := newTestManager(cfg, at(8*mi), []*v1.Pod{a, b, c}, fakeStats{})
	m.stats = f
	var reclaimed int
	m.containerGC = func(context.Context) error { return nil }
	// Image GC brings the signal above the threshold, not above it and
	// the minimum reclaim (5% of 100Mi): not enough, a pod goes.
	m.imageGC = func(context.Context) error { reclaimed++; sig.obs = at(12 * mi); return nil }
	ctx := context.Background()
	sig.obs = at(8 * mi)
	m.synchronize(ctx)
	if reclaimed != 1 || len(fp.stops) != 1 || fp.stops[0].uid != c.UID {
		t.Fatalf("reclaimed %d, stops %+v, want c evicted", reclaimed, fp.stops)
	}
	// Above the threshold but not yet by the minimum reclaim: the
	// threshold stays met and the next pod goes.
	m.imageGC = func(context.Context) error { return nil }
	fp.pods = []*v1.Pod{a, b}
	sig.obs = at(14 * mi)
	m.synchronize(ctx)
	if len(fp.stops) != 2 || fp.stops[1].uid != b.UID {
		t.Fatalf("stops %+v, want b evicted next", fp.stops)
	}
	// Above threshold and minimum reclaim: relieved.
	fp.pods = []*v1.Pod{a}
	sig.obs = at(16 * mi)
	m.synchronize(ctx)
	sig.obs = at(14 * mi) // no longer met, so no minimum reclaim to enforce
	m.synchronize(ctx)
	if len(fp.stops) != 2 {
		t.Errorf("evicted after relief: %+v", fp.stops)
	}
}

func TestLocalStorageEviction(t *testing.T) {
	f := newFakeDisk()
	limit := func(p *v1.Pod, q string) *v1.Pod {
		p.Spec.Containers[0].Resources.Limits[v1.ResourceEphemeralStorage] = resource.MustParse(q)
		return p
	}
	sized := func(p *v1.Pod, vol, q string) *v1.Pod {
		for i := range p.Spec.Volumes {
			if p.Spec.Volumes[i].Name == vol {
				p.Spec.Volumes[i].EmptyDir.SizeLimit = ptr.To(resource.MustParse(q))
			}
		}
		return p
	}
	// Over the sizeLimit of its memory-backed emptyDir (which counts for
	// its limit, though not for the node's disk).
	diskOf(f, "shm", mi, 0, 0, 20*mi)
	shm := sized(diskPod("shm", 0, 0), "shm", "16Mi")
	// Within the container limit by its layer and logs, over the pod's
	// (the container limit) with its emptyDir.
	diskOf(f, "pod", 10*mi, mi, 30*mi, 0)
	pod := limit(diskPod("pod", 0, 0), "32Mi")
	// Over its container limit by its layer and logs, within the pod's
	// (both containers').
	diskOf(f, "container", 60*mi, 10*mi, 0, 0)
	container := limit(diskPod("container", 0, 0), "64Mi")
	d := *container.Spec.Containers[0].DeepCopy()
	d.Name = "d"
	container.Spec.Containers = append(container.Spec.Containers, d)
	container.Status.ContainerStatuses = append(container.Status.ContainerStatuses, v1.ContainerStatus{Name: "d", ContainerID: "containerd://container-d"})
	f.fakeStats["container-d"] = runtime.ContainerStats{WorkingSet: mi}
	f.rootfs["container-d"] = runtime.DiskUsage{Bytes: mi}
	// Within every limit.
	diskOf(f, "fine", 10*mi, 0, 10*mi, 0)
	fine := sized(limit(diskPod("fine", 0, 0), "64Mi"), "scratch", "16Mi")
	// No limits: not even measured.
	diskOf(f, "free", 900*mi, 0, 900*mi, 0)
	free := diskPod("free", 0, 0)

	m, _, fp, rec, _ := newTestManager(Config{}, node.Observations{}, []*v1.Pod{shm, pod, container, fine, free}, fakeStats{})
	m.stats = f
	if m.synchronize(context.Background()) == nil {
		t.Fatal("no pod evicted")
	}
	want := map[string]string{
		"shm-uid":       `Usage of EmptyDir volume "shm" exceeds the limit "16Mi". `,
		"pod-uid":       "Pod ephemeral local storage usage exceeds the total limit of containers 32Mi. ",
		"container-uid": `Container c exceeded its local ephemeral storage limit "64Mi". `,
	}
	if len(fp.stops) != len(want) {
		t.Fatalf("stops %+v", fp.stops)
	}
	for _, s := range fp.stops {
		if s.req.Message != want[string(s.uid)] || s.req.Reason != Reason || s.req.Grace != time.Second || len(s.req.Conditions) != 0 {
			t.Errorf("%s: %+v, want message %q", s.uid, s.req, want[string(s.uid)])
		}
	}
	if ev := <-rec.Events; ev != "Warning Evicted "+want["shm-uid"] {
		t.Errorf("event %q", ev)
	}

	// localStorageCapacityIsolation: false: no pod is evicted over its
	// local storage limits, as the kubelet's.
	off, _, offPods, _, _ := newTestManager(Config{NoLocalStorageLimits: true}, node.Observations{}, []*v1.Pod{shm, pod, container, fine, free}, fakeStats{})
	off.stats = f
	if off.synchronize(context.Background()) != nil || len(offPods.stops) != 0 {
		t.Errorf("without local storage isolation: stops %+v", offPods.stops)
	}

	// With an image filesystem a container's limit counts its logs only.
	m.reclaim, fp.stops = nil, nil
	m.signals.(*fakeSignals).dedicated = true
	fp.pods = []*v1.Pod{container}
	if m.synchronize(context.Background()) != nil || len(fp.stops) != 0 {
		t.Errorf("dedicated imagefs: stops %+v", fp.stops)
	}
}

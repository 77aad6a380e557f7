package eviction

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const mi = 1 << 20

type fakeSignals struct {
	obs       node.Observations
	dedicated bool
	updates   int // UpdateStatus calls
}

func (f *fakeSignals) Observe(context.Context) node.Observations { return f.obs }

func (f *fakeSignals) HasDedicatedImageFs(context.Context) (bool, error) { return f.dedicated, nil }

func (f *fakeSignals) UpdateStatus() { f.updates++ }

type stopCall struct {
	uid types.UID
	req lifecycle.StopRequest
}

type fakePods struct {
	pods  []*v1.Pod
	stops []stopCall
}

func (f *fakePods) ActivePods() []*v1.Pod { return append([]*v1.Pod{}, f.pods...) }

func (f *fakePods) StopPod(uid types.UID, req lifecycle.StopRequest) lifecycle.Stopping {
	f.stops = append(f.stops, stopCall{uid, req})
	ch := make(chan struct{})
	close(ch)
	return lifecycle.Stopping{Ended: ch, Released: ch}
}

type fakeStats map[string]runtime.ContainerStats

func (f fakeStats) ContainerStats(context.Context) (map[string]runtime.ContainerStats, error) {
	return f, nil
}

func (fakeStats) RootfsUsage(context.Context, string) (runtime.DiskUsage, error) {
	return runtime.DiskUsage{}, errors.New("not measured")
}

func (fakeStats) DirUsage(string) (runtime.DiskUsage, error) {
	return runtime.DiskUsage{}, errors.New("not measured")
}

func (fakeStats) LogDir(namespace, name, uid string) string { return "/logs/" + name }

func (fakeStats) VolumeDir(pod *v1.Pod, name string) string {
	return "/volumes/" + pod.Name + "/" + name
}

// testPod is a running pod of one container "c" (ID name+"-c") with the
// given memory request and limit (0: none).
func testPod(name string, request, limit int64, priority int32) *v1.Pod {
	res := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	if request > 0 {
		res.Requests[v1.ResourceMemory] = *resource.NewQuantity(request, resource.BinarySI)
	}
	if limit > 0 {
		res.Limits[v1.ResourceMemory] = *resource.NewQuantity(limit, resource.BinarySI)
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")},
		Spec:       v1.PodSpec{Priority: ptr.To(priority), Containers: []v1.Container{{Name: "c", Resources: res}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: "c", ContainerID: "containerd://" + name + "-c"},
		}},
	}
}

func mustThresholds(t *testing.T, m map[string]string) node.Thresholds {
	t.Helper()
	ts, err := node.ParseThresholds(m)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestRankMemory(t *testing.T) {
	guaranteed := testPod("guaranteed", 100*mi, 100*mi, 0)
	hog := testPod("hog", 10*mi, 0, 0)
	small := testPod("small", 0, 0, 0)
	important := testPod("important", 0, 0, 1000)
	unknown := testPod("unknown", 0, 0, 0)
	unknownImportant := testPod("unknown-important", 0, 0, 10)
	samples := fakeStats{
		"guaranteed-c": {WorkingSet: 50 * mi}, "hog-c": {WorkingSet: 500 * mi},
		"small-c": {WorkingSet: 5 * mi}, "important-c": {WorkingSet: 900 * mi},
	}
	pods := []*v1.Pod{guaranteed, unknownImportant, important, small, hog, unknown}
	stats := map[*v1.Pod]usage{}
	for _, p := range pods {
		if u, ok := podUsage(p, samples); ok {
			stats[p] = u
		}
	}
	rankMemory(pods, stats)
	// No stats first; then use above requests; then priority; then use
	// above the request.
	want := []string{"unknown", "unknown-important", "hog", "small", "important", "guaranteed"}
	if got := names(pods); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("order %v, want %v", got, want)
	}
}

func newTestManager(cfg Config, obs node.Observations, pods []*v1.Pod, samples fakeStats) (*Manager, *fakeSignals, *fakePods, *record.FakeRecorder, *clocktesting.FakeClock) {
	sig := &fakeSignals{obs: obs}
	fp := &fakePods{pods: pods}
	rec := record.NewFakeRecorder(20)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := New(cfg, sig, fp, samples, nil, nil, rec, &v1.ObjectReference{Kind: "Node", Name: "n"}, clk)
	return m, sig, fp, rec, clk
}

func TestHardMemoryEvictsOnePodWithKubeletMessage(t *testing.T) {
	hog := testPod("hog", 10*mi, 2048*mi, 0)
	guaranteed := testPod("guaranteed", 64*mi, 64*mi, 0)
	critical := testPod("critical", 0, 0, 2000001000)
	critical.Status.ContainerStatuses[0].ContainerID = "containerd://critical-c"
	samples := fakeStats{"hog-c": {WorkingSet: 1536 * mi}, "guaranteed-c": {WorkingSet: 20 * mi}, "critical-c": {WorkingSet: 4096 * mi}}
	obs := node.Observations{node.SignalMemoryAvailable: {Available: 900 * mi, Capacity: 8192 * mi}}
	m, sig, fp, rec, _ := newTestManager(Config{Hard: mustThresholds(t, map[string]string{"memory.available": "1Gi"})},
		obs, []*v1.Pod{guaranteed, critical, hog}, samples)

	if m.synchronize(context.Background()) == nil {
		t.Fatal("no pod evicted")
	}
	if len(fp.stops) != 1 || fp.stops[0].uid != hog.UID {
		t.Fatalf("stops %+v, want only the hog (the critical pod is spared)", fp.stops)
	}
	req := fp.stops[0].req
	const want = "The node was low on resource: memory. Threshold quantity: 1Gi, available: 900Mi. Container c was using 1536Mi, request is 10Mi, has larger consumption of memory. "
	if req.Reason != "Evicted" || req.Message != want || req.Grace != time.Second {
		t.Errorf("stop request %+v\nwant message %q", req, want)
	}
	if len(req.Conditions) != 1 || req.Conditions[0].Type != v1.DisruptionTarget || req.Conditions[0].Reason != v1.PodReasonTerminationByKubelet ||
		req.Conditions[0].Status != v1.ConditionTrue || req.Conditions[0].Message != want {
		t.Errorf("conditions %+v", req.Conditions)
	}
	events := []string{<-rec.Events, <-rec.Events}
	// The fake recorder prints the annotations after the message.
	if events[0] != "Warning EvictionThresholdMet Attempting to reclaim memory" ||
		events[1] != "Warning Evicted "+want+" map[offending_containers:c offending_containers_usage:1536Mi starved_resource:memory]" {
		t.Errorf("events %q", events)
	}

	// Pressure gone: nothing more happens.
	fp.pods = []*v1.Pod{guaranteed, critical}
	sig.obs = node.Observations{node.SignalMemoryAvailable: {Available: 2048 * mi, Capacity: 8192 * mi}}
	if m.synchronize(context.Background()) != nil || len(fp.stops) != 1 {
		t.Errorf("evicted without pressure: %+v", fp.stops)
	}
}

func TestSoftThresholdWaitsForItsGracePeriod(t *testing.T) {
	hog := testPod("hog", 0, 0, 0)
	hog.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	m, sig, fp, _, clk := newTestManager(Config{
		Soft:      mustThresholds(t, map[string]string{"memory.available": "10%"}),
		SoftGrace: map[string]time.Duration{"memory.available": time.Minute}, MaxPodGrace: 20 * time.Second,
	}, node.Observations{node.SignalMemoryAvailable: {Available: 500 * mi, Capacity: 8192 * mi}}, []*v1.Pod{hog}, fakeStats{"hog-c": {WorkingSet: 100 * mi}})
	ctx := context.Background()
	m.synchronize(ctx)
	clk.Step(59 * time.Second)
	m.synchronize(ctx)
	if len(fp.stops) != 0 {
		t.Fatalf("evicted within the grace period: %+v", fp.stops)
	}
	// Relieved for one round: the grace period starts again.
	sig.obs = node.Observations{node.SignalMemoryAvailable: {Available: 1024 * mi, Capacity: 8192 * mi}}
	m.synchronize(ctx)
	sig.obs = node.Observations{node.SignalMemoryAvailable: {Available: 500 * mi, Capacity: 8192 * mi}}
	clk.Step(time.Second)
	m.synchronize(ctx)
	clk.Step(59 * time.Second)
	m.synchronize(ctx)
	if len(fp.stops) != 0 {
		t.Fatalf("grace period not restarted: %+v", fp.stops)
	}
	clk.Step(time.Second)
	m.synchronize(ctx)
	if len(fp.stops) != 1 {
		t.Fatalf("not evicted after the grace period")
	}
	// The smaller of --eviction-max-pod-grace-period and the pod's own.
	req := fp.stops[0].req
	const want = "The node was low on resource: memory. Threshold quantity: 858993459, available: 500Mi. Container c was using 100Mi, request is 0, has larger consumption of memory. "
	if req.Grace != 20*time.Second || req.Message != want {
		t.Errorf("grace %v message %q, want %q", req.Grace, req.Message, want)
	}
}

func TestDiskReclaimBeforeEviction(t *testing.T) {
	pod := testPod("p", 0, 0, 0)
	obs := node.Observations{node.SignalNodeFsAvailable: {Available: 5, Capacity: 100}}
	m, sig, fp, _, _ := newTestManager(Config{Hard: mustThresholds(t, map[string]string{"nodefs.available": "10%"})},
		obs, []*v1.Pod{pod}, fakeStats{})
	var calls []string
	m.containerGC = func(context.Context) error { calls = append(calls, "containers"); return nil }
	m.imageGC = func(context.Context) error {
		calls = append(calls, "images")
		sig.obs = node.Observations{node.SignalNodeFsAvailable: {Available: 50, Capacity: 100}}
		return nil
	}
	if m.synchronize(context.Background()) != nil || len(fp.stops) != 0 {
		t.Errorf("evicted although reclaim sufficed: %+v", fp.stops)
	}
	if len(calls) != 2 || calls[0] != "containers" || calls[1] != "images" {
		t.Errorf("reclaim calls %v", calls)
	}

	// Images on a filesystem of their own: nodefs pressure frees none of
	// them and goes straight to evicting.
	calls = nil
	m.reclaim, sig.dedicated = nil, true
	sig.obs = obs
	m.synchronize(context.Background())
	if len(calls) != 0 || len(fp.stops) != 1 {
		t.Errorf("dedicated imagefs: reclaim calls %v, stops %+v", calls, fp.stops)
	}
}

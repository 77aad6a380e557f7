package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeStopper records the stops asked for; a pod's stop is done when the
// test says so.
type fakeStopper struct {
	pods []*v1.Pod
	mu   sync.Mutex
	reqs map[types.UID]lifecycle.StopRequest
	done map[types.UID]chan struct{}
}

func (f *fakeStopper) ActivePods() []*v1.Pod { return f.pods }

func (f *fakeStopper) StopPod(uid types.UID, req lifecycle.StopRequest) lifecycle.Stopping {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs[uid] = req
	// Released never: the shutdown does not wait for it.
	return lifecycle.Stopping{Ended: f.done[uid], Released: make(chan struct{})}
}

func (f *fakeStopper) asked(uid types.UID) (lifecycle.StopRequest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reqs[uid]
	return r, ok
}

// fakeStatuses says a pod's status is written once the test closes its
// channel.
type fakeStatuses map[types.UID]chan struct{}

func (f fakeStatuses) WaitWritten(ctx context.Context, uid types.UID) error {
	select {
	case <-f[uid]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func shutdownPod(uid string, grace int64, priority int32) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &grace, Priority: &priority},
	}
}

func testShutdown(pods ...*v1.Pod) (*ShutdownManager, *fakeStopper, fakeStatuses, *clocktesting.FakeClock) {
	stopper := &fakeStopper{pods: pods, reqs: map[types.UID]lifecycle.StopRequest{}, done: map[types.UID]chan struct{}{}}
	statuses := fakeStatuses{}
	for _, p := range pods {
		stopper.done[p.UID] = make(chan struct{})
		statuses[p.UID] = make(chan struct{})
	}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := NewShutdownManager(ShutdownConfig{GracePeriod: 20 * time.Second, CriticalGracePeriod: 8 * time.Second},
		nil, stopper, statuses, nil)
	m.clock = clk
	return m, stopper, statuses, clk
}

func waitAsked(t *testing.T, s *fakeStopper, uid types.UID) lifecycle.StopRequest {
	t.Helper()
	for i := 0; i < 200; i++ {
		if r, ok := s.asked(uid); ok {
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pod %s was never stopped", uid)
	return lifecycle.StopRequest{}
}

// A pod asking for more than its group's period is killed before the
// period ends, leaving the reserve for the kill and its status write; one
// asking for less keeps its own grace. The critical group starts only when
// every regular pod is stopped and its status written, not before.
func TestShutdownKillsWithinPeriodAndWaitsForStatus(t *testing.T) {
	long := shutdownPod("long", 60, 0)
	short := shutdownPod("short", 2, 0)
	crit := shutdownPod("crit", 30, systemCriticalPriority)
	m, stopper, statuses, _ := testShutdown(long, short, crit)
	finished := make(chan struct{})
	go func() { m.stopPods(); close(finished) }()

	// Regular group: 12 s, of which 3 s are kept after the kill.
	if r := waitAsked(t, stopper, "long"); r.Grace != 9*time.Second || r.Reason != nodeShutdownReason {
		t.Errorf("long pod: grace %v reason %q, want 9s Terminated", r.Grace, r.Reason)
	}
	if r := waitAsked(t, stopper, "short"); r.Grace != 2*time.Second {
		t.Errorf("short pod: grace %v, want its own 2s", r.Grace)
	}
	close(stopper.done["long"])
	close(stopper.done["short"])
	close(statuses["short"])
	time.Sleep(20 * time.Millisecond)
	if _, ok := stopper.asked("crit"); ok {
		t.Fatal("critical pod stopped while a regular pod's status was not written")
	}
	close(statuses["long"])

	// Critical group: 8 s, 2 s kept.
	if r := waitAsked(t, stopper, "crit"); r.Grace != 6*time.Second {
		t.Errorf("critical pod: grace %v, want 6s", r.Grace)
	}
	close(stopper.done["crit"])
	close(statuses["crit"])
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("stopPods did not return once every pod was stopped and written")
	}
}

// A group whose pods do not finish gets its period and no more: the next
// group starts, and stopPods returns, when the periods have passed.
func TestShutdownGroupTimesOut(t *testing.T) {
	stuck := shutdownPod("stuck", 60, 0)
	crit := shutdownPod("crit", 60, systemCriticalPriority)
	m, stopper, _, clk := testShutdown(stuck, crit)
	finished := make(chan struct{})
	go func() { m.stopPods(); close(finished) }()
	waitAsked(t, stopper, "stuck")
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(12*time.Second - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if _, ok := stopper.asked("crit"); ok {
		t.Fatal("critical group started before the regular group's period was over")
	}
	clk.Step(time.Millisecond)
	waitAsked(t, stopper, "crit")
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(8 * time.Second)
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("stopPods did not return after the periods")
	}
}

func TestKillReserve(t *testing.T) {
	for period, want := range map[time.Duration]time.Duration{
		0: 0, 2 * time.Second: 500 * time.Millisecond, 12 * time.Second: 3 * time.Second, 20 * time.Second: 5 * time.Second, 40 * time.Second: 10 * time.Second, time.Minute: 10 * time.Second,
	} {
		if got := killReserve(period); got != want {
			t.Errorf("killReserve(%v) = %v, want %v", period, got, want)
		}
	}
}

// hostlet leave removes the logind drop-in hostlet wrote, known by its
// first line, and has logind reload; a drop-in of that name someone else
// wrote stays, and nothing is reloaded for it or for none at all.
func TestRemoveLogindOverride(t *testing.T) {
	dir := t.TempDir()
	reloads := 0
	reload := func() error { reloads++; return nil }
	p := filepath.Join(dir, logindDropIn)
	if removed, err := RemoveLogindOverride(dir, reload); removed || err != nil || reloads != 0 {
		t.Fatalf("none there: removed %v, %v, %d reloads", removed, err, reloads)
	}
	theirs := "# ours, not hostlet's\n" + logindMarker + "\n[Login]\nInhibitDelayMaxSec=600\n"
	if err := os.WriteFile(p, []byte(theirs), 0o644); err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveLogindOverride(dir, reload); removed || err != nil || reloads != 0 {
		t.Fatalf("someone else's: removed %v, %v, %d reloads", removed, err, reloads)
	}
	if b, _ := os.ReadFile(p); string(b) != theirs {
		t.Fatalf("someone else's drop-in changed: %q", b)
	}
	// What hostlet writes.
	m := &ShutdownManager{cfg: ShutdownConfig{LogindConfDir: dir, GracePeriod: 30 * time.Second}}
	if err := m.writeLogindOverride(); err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveLogindOverride(dir, reload); !removed || err != nil || reloads != 1 {
		t.Fatalf("hostlet's: removed %v, %v, %d reloads", removed, err, reloads)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("hostlet's drop-in left: %v", err)
	}
}

// shutdownGracePeriodByPodPriority bands pods as the kubelet's
// groupByPriority: each into the highest band at or below its priority,
// below the lowest into the lowest, above the highest into the highest;
// the bands are stopped lowest first, each pod within its band's period,
// and logind is asked for all the periods together.
func TestShutdownByPodPriority(t *testing.T) {
	pods := []*v1.Pod{shutdownPod("neg", 600, -5), shutdownPod("low", 600, 50), shutdownPod("mid", 600, 10000),
		shutdownPod("edge", 600, 100000), shutdownPod("top", 600, systemCriticalPriority+1000)}
	m, stopper, statuses, _ := testShutdown(pods...)
	m.cfg.ByPodPriority = []ShutdownPriority{
		{Priority: 100000, GracePeriod: 40 * time.Second},
		{Priority: 0, GracePeriod: 20 * time.Second},
		{Priority: 10000, GracePeriod: 8 * time.Second},
	}
	if got := m.period(); got != 68*time.Second {
		t.Errorf("period %v, want 68s", got)
	}
	var got []string
	for _, g := range groupByPriority(m.groups(), pods) {
		s := fmt.Sprint(g.priority, ":")
		for _, p := range g.pods {
			s += " " + p.Name
		}
		got = append(got, s)
	}
	if want := []string{"0: neg low", "10000: mid", "100000: edge top"}; !reflect.DeepEqual(got, want) {
		t.Errorf("bands %q, want %q", got, want)
	}

	finished := make(chan struct{})
	go func() { m.stopPods(); close(finished) }()
	// Each band's period less its reserve (a quarter, at most 10 s).
	bands := []struct {
		pods  []types.UID
		grace time.Duration
	}{{[]types.UID{"neg", "low"}, 15 * time.Second}, {[]types.UID{"mid"}, 6 * time.Second}, {[]types.UID{"edge", "top"}, 30 * time.Second}}
	for i, band := range bands {
		for _, uid := range band.pods {
			if r := waitAsked(t, stopper, uid); r.Grace != band.grace {
				t.Errorf("%s: grace %v, want %v", uid, r.Grace, band.grace)
			}
		}
		if i+1 < len(bands) {
			time.Sleep(20 * time.Millisecond)
			if _, asked := stopper.asked(bands[i+1].pods[0]); asked {
				t.Errorf("%s stopped before the band below it was done", bands[i+1].pods[0])
			}
		}
		for _, uid := range band.pods {
			close(stopper.done[uid])
			close(statuses[uid])
		}
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("stopPods did not return")
	}
}

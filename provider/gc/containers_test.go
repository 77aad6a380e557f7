package gc

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakeContainers struct {
	list    []runtime.ContainerStatus
	removed []string
}

func (f *fakeContainers) ListContainers(context.Context, string) ([]runtime.ContainerStatus, error) {
	return f.list, nil
}

func (f *fakeContainers) RemoveContainer(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	return nil
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// instances are attempts 0..n-1 of one container, the last running,
// created a minute apart.
func instances(uid, name string, n int, lastRunning bool) []runtime.ContainerStatus {
	var out []runtime.ContainerStatus
	for i := range n {
		st := runtime.ContainerStatus{ID: fmt.Sprintf("%s-%s-%d", uid, name, i), PodUID: uid, Name: name, Attempt: i,
			State: runtime.StateExited, CreatedAt: t0.Add(time.Duration(i) * time.Minute)}
		if i == n-1 && lastRunning {
			st.State = runtime.StateRunning
		}
		out = append(out, st)
	}
	return out
}

func collect(t *testing.T, p ContainerPolicy, now time.Time, list ...[]runtime.ContainerStatus) []string {
	t.Helper()
	f := &fakeContainers{list: slices.Concat(list...)}
	g := NewContainerGC(f, p, clocktesting.NewFakeClock(now), record.NewFakeRecorder(10), node)
	if err := g.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	sort.Strings(f.removed)
	return f.removed
}

// The kubelet's defaults keep one dead instance per container: with the
// current one and the last terminated before it kept for the status,
// older dead instances go, oldest first.
func TestContainerGCPerContainer(t *testing.T) {
	now := t0.Add(time.Hour)
	got := collect(t, ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1}, now,
		instances("p1", "app", 5, true), instances("p1", "init", 1, false), instances("p2", "app", 2, false))
	if want := []string{"p1-app-0", "p1-app-1", "p1-app-2"}; !slices.Equal(got, want) {
		t.Fatalf("removed %q, want %q", got, want)
	}
	// Three dead kept per container: the previous and two more.
	got = collect(t, ContainerPolicy{MaxPerPodContainer: 3, MaxContainers: -1}, now, instances("p1", "app", 5, true))
	if want := []string{"p1-app-0"}; !slices.Equal(got, want) {
		t.Fatalf("max 3: removed %q, want %q", got, want)
	}
	// No limit, or zero: zero still keeps what the status needs.
	if got := collect(t, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: -1}, now, instances("p1", "app", 5, true)); len(got) != 0 {
		t.Fatalf("no limit: removed %q", got)
	}
	if got := collect(t, ContainerPolicy{MaxPerPodContainer: 0, MaxContainers: -1}, now, instances("p1", "app", 3, false)); !slices.Equal(got, []string{"p1-app-0"}) {
		t.Fatalf("max 0: removed %q", got)
	}
}

// A dead container younger than the minimum TTL stays.
func TestContainerGCMinAge(t *testing.T) {
	got := collect(t, ContainerPolicy{MinAge: 90 * time.Minute, MaxPerPodContainer: 0, MaxContainers: -1},
		t0.Add(2*time.Hour), instances("p1", "app", 6, true))
	// Created at t0+0..5m, all older than 90 minutes at t0+2h: all but the
	// running one and the previous go.
	if want := []string{"p1-app-0", "p1-app-1", "p1-app-2", "p1-app-3"}; !slices.Equal(got, want) {
		t.Fatalf("removed %q, want %q", got, want)
	}
	// Older than 118 minutes: those created up to t0+2m.
	got = collect(t, ContainerPolicy{MinAge: 118 * time.Minute, MaxPerPodContainer: 0, MaxContainers: -1},
		t0.Add(2*time.Hour), instances("p1", "app", 6, true))
	if want := []string{"p1-app-0", "p1-app-1", "p1-app-2"}; !slices.Equal(got, want) {
		t.Fatalf("removed %q, want %q", got, want)
	}
}

// The node-wide limit shares itself among containers, then takes the
// oldest on the node; never what the status needs.
func TestContainerGCMaxContainers(t *testing.T) {
	now := t0.Add(time.Hour)
	a := instances("p1", "a", 6, true) // dead 0..4, 4 kept
	b := instances("p2", "b", 3, true) // dead 0..1, 1 kept
	// 7 dead, limit 4 over 2 containers: 2 dead each. a keeps 4 and 3,
	// b keeps 1 and 0: 4 dead left.
	got := collect(t, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 4}, now, a, b)
	if want := []string{"p1-a-0", "p1-a-1", "p1-a-2"}; !slices.Equal(got, want) {
		t.Fatalf("removed %q, want %q", got, want)
	}
	// Limit 0: everything not needed goes.
	got = collect(t, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 0}, now, a, b)
	if want := []string{"p1-a-0", "p1-a-1", "p1-a-2", "p1-a-3", "p2-b-0"}; !slices.Equal(got, want) {
		t.Fatalf("limit 0: removed %q, want %q", got, want)
	}
}

package runtime

import (
	"context"
	"fmt"
	"testing"
)

func TestShimGroupsFillThenOpenAnother(t *testing.T) {
	s := newShimGroups("run", 1)
	seen := map[string]int{}
	for i := 0; i < 2*containersPerShim+1; i++ {
		id := fmt.Sprint(i)
		g := s.pick("")
		if !s.join(id, g) {
			t.Fatalf("container %d refused by the group it was just given (%s)", i, g)
		}
		s.created(id, true)
		seen[g]++
	}
	if len(seen) != 3 || seen["run-1"] != containersPerShim || seen["run-2"] != containersPerShim || seen["run-3"] != 1 {
		t.Fatalf("groups = %v, want %d, %d and 1 container", seen, containersPerShim, containersPerShim)
	}
}

// With several groups open, consecutive containers go to different shims
// (a shim creates its tasks one at a time), each group still filled to
// containersPerShim, and a closed one replaced in its turn.
func TestShimGroupsSpread(t *testing.T) {
	s := newShimGroups("run", 2)
	var order []string
	count := map[string]int{}
	for i := 0; i < 2*containersPerShim; i++ {
		g := s.pick("")
		order = append(order, g)
		count[g]++
	}
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			t.Fatalf("containers %d and %d both given %s; picks %v", i-1, i, order[i], order)
		}
	}
	if len(count) != 2 || count["run-1"] != containersPerShim || count["run-2"] != containersPerShim {
		t.Fatalf("groups = %v, want two of %d", count, containersPerShim)
	}
	if a, b := s.pick(""), s.pick(""); a == b || count[a] > 0 || count[b] > 0 {
		t.Fatalf("after two full groups, picks %s and %s, want two new ones", a, b)
	}
	// A removal does not close a group still open; a closed one (its shim
	// exiting) is replaced in its turn, and the other open one still given.
	s = newShimGroups("run", 2)
	g1, g2 := s.pick(""), s.pick("")
	s.removed("x", g1)
	if !s.isOpen(s.groups[g1]) {
		t.Fatalf("%s closed by a removal while still open for new containers", g1)
	}
	s.close(s.groups[g1])
	if g := s.pick(""); g == g1 || g == g2 {
		t.Fatalf("pick gave %s, want a new group in %s's turn", g, g1)
	}
	if g := s.pick(""); g != g2 {
		t.Fatalf("pick gave %s, want %s (open, its turn)", g, g2)
	}
}

// A shim runs its containers with its handler's binary and options: the
// containers of two handlers never share one, each handler filling groups
// of its own.
func TestShimGroupsPerHandler(t *testing.T) {
	s := newShimGroups("run", 1)
	byHandler := map[string]map[string]bool{}
	for i := 0; i < 3; i++ {
		for _, h := range []string{"", "crun", "runc"} {
			id := fmt.Sprint(h, i)
			g := s.pick(h)
			if !s.join(id, g) {
				t.Fatalf("container %s refused by its group %s", id, g)
			}
			s.created(id, true)
			if byHandler[h] == nil {
				byHandler[h] = map[string]bool{}
			}
			byHandler[h][g] = true
		}
	}
	owner := map[string]string{}
	for h, groups := range byHandler {
		if len(groups) != 1 {
			t.Errorf("handler %q: 3 containers in groups %v, want one", h, groups)
		}
		for g := range groups {
			if o, ok := owner[g]; ok {
				t.Errorf("group %s has containers of handlers %q and %q", g, o, h)
			}
			owner[g] = h
		}
	}
}

// A group whose last task is being deleted has a shim that is exiting:
// nothing may join it again, not even a container given it before.
func TestShimGroupsClosedByLastDeletion(t *testing.T) {
	s := newShimGroups("run", 1)
	a, b := s.pick(""), s.pick("")
	if a != b {
		t.Fatalf("two containers in a row got %s and %s", a, b)
	}
	s.join("a", a)
	s.created("a", true)
	s.deleting("a")
	if s.join("b", b) {
		t.Fatal("a container joined a group whose last task was being deleted")
	}
	s.gone("a")
	if g := s.pick(""); g == a || !s.join("b", g) {
		t.Fatalf("after the group closed, pick gave %s (closed: %s)", g, a)
	}
}

// One task left after a deletion keeps the group open.
func TestShimGroupsOpenWhileATaskRemains(t *testing.T) {
	s := newShimGroups("run", 1)
	g := s.pick("")
	_, _ = s.pick(""), s.pick("")
	for _, id := range []string{"a", "b"} {
		s.join(id, g)
		s.created(id, true)
	}
	s.deleting("a")
	s.gone("a")
	if !s.join("c", g) {
		t.Fatal("group closed although a task remained in it")
	}
	s.created("c", true)
	// Gone twice, or a task never counted, changes nothing.
	s.gone("a")
	s.gone("unknown")
	if n := s.groups[g].tasks; n != 2 {
		t.Fatalf("tasks = %d, want 2", n)
	}
}

// The deletion of a group's last task waits for a creation under way, so
// the shim still has a task when it is asked to exit.
func TestShimGroupsLastDeletionWaitsForCreation(t *testing.T) {
	s := newShimGroups("run", 1)
	g := s.pick("")
	_ = s.pick("")
	s.join("a", g)
	s.created("a", true)
	s.join("b", g) // b's task is being created
	done := make(chan struct{})
	go func() {
		s.deleting("a")
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the last task's deletion did not wait for the creation under way")
	default:
	}
	s.created("b", true)
	<-done
	if s.groups[g] == nil {
		t.Fatal("group closed although b's task is in it")
	}
}

// Two tasks deleted at once are both a group's last: whichever begins
// second closes the group (its shim exits once both are gone), so a new
// container does not join it.
func TestShimGroupsConcurrentLastDeletions(t *testing.T) {
	s := newShimGroups("run", 1)
	g := s.pick("")
	_ = s.pick("")
	for _, id := range []string{"a", "b"} {
		if !s.join(id, g) {
			t.Fatalf("%s refused by its group", id)
		}
		s.created(id, true)
	}
	s.deleting("a")
	if s.groups[g] == nil {
		t.Fatal("group closed while b's task is not being deleted")
	}
	s.deleting("b")
	if s.join("c", g) {
		t.Fatal("c joined a group both of whose tasks are being deleted")
	}
	// A deletion that failed leaves its task counted, not being deleted.
	s2 := newShimGroups("run2", 1)
	g2 := s2.pick("")
	for _, id := range []string{"a", "b"} {
		s2.join(id, g2)
		s2.created(id, true)
	}
	s2.deleting("a")
	s2.deleteFailed("a")
	s2.deleting("b")
	if s2.groups[g2] == nil {
		t.Fatal("group closed by b's deletion although a's task stayed")
	}
	s2.gone("b")
	if got := s2.byTask["a"]; got == nil || got.tasks != 1 || got.deleting != 0 {
		t.Fatalf("a's group after b is gone: %+v, want 1 task, none being deleted", got)
	}
}

// A group's first task is created alone; if it fails, the group closes and
// whoever waited moves on.
func TestShimGroupsFirstCreationAlone(t *testing.T) {
	s := newShimGroups("run", 1)
	g := s.pick("")
	_ = s.pick("")
	s.join("a", g)
	joined := make(chan bool)
	go func() { joined <- s.join("b", g) }()
	select {
	case <-joined:
		t.Fatal("a second creation joined before the group's first task existed")
	default:
	}
	s.created("a", false)
	if <-joined {
		t.Fatal("joined a group whose first creation failed")
	}
}

// Containers of an earlier hostlet run carry a group this run never gave:
// its shim may be exiting, so they move to a group of this run.
func TestShimGroupsRefuseEarlierRun(t *testing.T) {
	s := newShimGroups("new", 1)
	if s.join("x", "old-1") {
		t.Fatal("joined a group of an earlier run")
	}
}

func TestGateCancel(t *testing.T) {
	g := make(gate, 1)
	if err := g.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.enter(ctx); err == nil {
		t.Fatal("entered a full gate with a cancelled context")
	}
	g.leave()
	if err := g.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A full group whose containers were all removed before any of them started
// is dropped; a container of it that starts after all moves to another.
func TestShimGroupsDroppedWhenNoneStarted(t *testing.T) {
	s := newShimGroups("run", 1)
	var g string
	for i := 0; i < containersPerShim; i++ {
		g = s.pick("")
	}
	for i := 0; i < containersPerShim-1; i++ {
		s.removed(fmt.Sprint(i), g)
	}
	if len(s.groups) != 0 {
		t.Fatalf("groups = %v after its containers were removed unstarted, want none", s.groups)
	}
	if s.join("last", g) {
		t.Fatal("a container joined a dropped group")
	}
	if n := s.pick(""); n == g || !s.join("last", n) {
		t.Fatalf("pick gave %s after %s was dropped", n, g)
	}
}

// The open group stays while it is still given containers, and a group
// with a task is never dropped by a removal.
func TestShimGroupsKeptWhileOpenOrRunning(t *testing.T) {
	s := newShimGroups("run", 1)
	g := s.pick("")
	s.removed("a", g)
	if s.groups[g] == nil {
		t.Fatal("the open group was dropped while new containers are still given it")
	}
	s.pick("")
	s.join("b", g)
	s.created("b", true)
	for i := 2; i < containersPerShim; i++ {
		s.pick("")
	}
	s.removed("c", g)
	if s.groups[g] == nil {
		t.Fatal("a group with a running task was dropped")
	}
}

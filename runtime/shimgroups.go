package runtime

import (
	"fmt"
	"slices"
	"sync"
)

// shimGroupAnnotation makes containerd's runc shim serve every container
// whose spec carries the same value: containerd-shim-runc-v2 reads it when
// a task is created and joins the running shim of that group, as CRI does
// for the containers of one pod. A shim is a process of its own (a Go
// runtime's start and about 5 MiB each); sharing one between several pods'
// containers makes bursts cheaper and the node lighter.
const shimGroupAnnotation = "io.containerd.runc.v2.group"

// containersPerShim bounds a shim's group: a shim that dies takes its
// containers' stdio and exit codes with it, so one shim never carries the
// whole node.
const containersPerShim = 8

// shimGroups hands containers their shim group and orders task creations
// and deletions within a group so that none lands in an exiting shim.
// containerd asks a shim to exit after each task deletion, and it does when
// it has no task left, even if a creation is under way in it (CRI never
// meets this: a pod's sandbox task outlives its containers). So:
//   - a group's first task is created alone, and a group whose first
//     creation failed is closed;
//   - the deletion of a group's last task waits for the creations under way,
//     and closes the group before it starts: no task joins it again. "Last"
//     counts the deletions under way: two tasks deleted at once are both a
//     group's last (each saw the other still there, its shim exited under a
//     creation that joined it: "ttrpc: closed", seen in the storage specs);
//   - groups of an earlier hostlet run are never joined (their shims may be
//     exiting); their containers move to a group of this run;
//   - a group holds the containers of one runtime handler: a shim runs
//     the containers of others with its own binary and options.
type shimGroups struct {
	mu     sync.Mutex
	cond   *sync.Cond
	prefix string // unique per run
	seq    int
	open   map[string][]string   // handler -> the groups its new containers are given, next first
	spread int                   // how many groups of a handler are open at once
	groups map[string]*shimGroup // this run's groups that are not closed
	byTask map[string]*shimGroup // container ID -> group of its task
	dying  map[string]bool       // container IDs whose task deletion is under way
}

type shimGroup struct {
	name     string
	handler  string
	given    int // containers given the group
	creating int // task creations under way
	tasks    int // tasks created and not deleted
	deleting int // of those, deletions under way
}

// left is how many of g's tasks are not being deleted.
func (g *shimGroup) left() int { return g.tasks - g.deleting }

func newShimGroups(prefix string, spread int) *shimGroups {
	s := &shimGroups{prefix: prefix, spread: max(spread, 1), open: map[string][]string{}, groups: map[string]*shimGroup{}, byTask: map[string]*shimGroup{}, dying: map[string]bool{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// pick returns the group a new container of handler is created in: the
// next of the handler's open groups in turn, each open until it has been
// given containersPerShim containers or was closed. Consecutive containers
// go to different shims because a shim creates its tasks one at a time
// (containerd-shim-runc-v2 holds its lock through runc create, and its
// other calls wait on that lock): the gate's concurrent creations, taken
// in arrival order, would otherwise queue in one shim.
func (s *shimGroups) pick(handler string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The first open group is given and goes to the back; until spread
	// are open, a new one is.
	open, name := s.open[handler], ""
	if len(open) >= s.spread {
		name, open = open[0], open[1:]
	}
	g := s.groups[name]
	if g == nil || g.given >= containersPerShim {
		s.seq++
		g = &shimGroup{name: fmt.Sprintf("%s-%d", s.prefix, s.seq), handler: handler}
		s.groups[g.name] = g
	}
	s.open[handler] = append(open, g.name)
	g.given++
	return g.name
}

// isOpen reports whether new containers may still be given g; s.mu is held.
func (s *shimGroups) isOpen(g *shimGroup) bool {
	return g.given < containersPerShim && slices.Contains(s.open[g.handler], g.name)
}

// join is called before id's task is created in group, and created after.
// It refuses a group that is closed or of another run: the caller moves
// the container to a group from pick.
func (s *shimGroups) join(id, group string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		g := s.groups[group]
		if g == nil {
			return false
		}
		if g.tasks == 0 && g.creating > 0 {
			s.cond.Wait() // the group's first task is created alone
			continue
		}
		g.creating++
		s.byTask[id] = g
		return true
	}
}

// created ends a creation join began; ok says whether the task exists.
func (s *shimGroups) created(id string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.cond.Broadcast()
	g := s.byTask[id]
	if g == nil {
		return
	}
	g.creating--
	if ok {
		g.tasks++
		return
	}
	s.forget(id, g) // with no task, its shim, if it started, is exiting
}

// deleting is called before id's task is deleted: the last task of a group
// (the last one not being deleted) waits for the creations under way, then
// closes the group.
func (s *shimGroups) deleting(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.byTask[id]
	if g == nil {
		return
	}
	if !s.dying[id] {
		s.dying[id] = true
		g.deleting++
	}
	for g.left() <= 0 && g.creating > 0 {
		s.cond.Wait()
	}
	if g.left() <= 0 {
		s.close(g)
	}
}

// deleteFailed ends a deletion deleting began whose task is still there
// (its group, if closed, stays closed: its shim may yet exit).
func (s *shimGroups) deleteFailed(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.byTask[id]; g != nil && s.dying[id] {
		delete(s.dying, id)
		g.deleting--
	}
}

// gone records that id's task no longer exists.
func (s *shimGroups) gone(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskGone(id)
}

// taskGone drops id's task if it had one; s.mu is held.
func (s *shimGroups) taskGone(id string) bool {
	g := s.byTask[id]
	if g == nil {
		return false
	}
	g.tasks--
	if s.dying[id] {
		delete(s.dying, id)
		g.deleting--
	}
	s.forget(id, g)
	return true
}

// removed records that id's container is deleted without a task. A group
// none of whose containers has a task or a creation under way is closed
// unless new containers are still given it: nothing runs in its shim, and a
// container of it that starts later moves to an open group (join refuses).
// Without this a full group whose containers were all removed before they
// started would stay in the map for good.
func (s *shimGroups) removed(id, group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taskGone(id) { // its task went away unseen
		return
	}
	g := s.groups[group]
	if g != nil && g.tasks == 0 && g.creating == 0 && !s.isOpen(g) {
		s.close(g)
	}
}

// forget drops id's task from g, closing g if none is left.
func (s *shimGroups) forget(id string, g *shimGroup) {
	delete(s.byTask, id)
	if g.tasks <= 0 {
		s.close(g)
	}
}

func (s *shimGroups) close(g *shimGroup) { delete(s.groups, g.name) }

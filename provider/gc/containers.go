package gc

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Containers is what container GC needs of the runtime.
type Containers interface {
	ListContainers(ctx context.Context, podUID string) ([]runtime.ContainerStatus, error)
	RemoveContainer(ctx context.Context, id string) error
}

// ContainerPolicy is the kubelet's container GC policy.
type ContainerPolicy struct {
	// MinAge: a dead container younger than this (since its creation) stays.
	MinAge time.Duration
	// MaxPerPodContainer dead instances kept per container of a pod, and
	// MaxContainers dead containers on the node; negative: no limit.
	MaxPerPodContainer, MaxContainers int
}

// ContainerGC removes dead containers as the kubelet's container GC does,
// except what the pod status still needs: the newest instance of each
// container and the last one terminated before it (its lastState, and
// what `kubectl logs --previous` reads) are never removed, whatever the
// limits. Containers of deleted pods are the provider's cleanup.
type ContainerGC struct {
	containers Containers
	policy     ContainerPolicy
	clock      clock.Clock
	events     record.EventRecorder
	node       *v1.ObjectReference
}

func NewContainerGC(containers Containers, policy ContainerPolicy, clk clock.Clock, events record.EventRecorder, node *v1.ObjectReference) *ContainerGC {
	return &ContainerGC{containers: containers, policy: policy, clock: clk, events: events, node: node}
}

// Run collects every period until ctx ends; a failure is a
// ContainerGCFailed event on the node.
func (g *ContainerGC) Run(ctx context.Context, period time.Duration) {
	for {
		if err := g.GarbageCollect(ctx); err != nil {
			log.WithError(err).Error("container garbage collection failed")
			g.events.Event(g.node, v1.EventTypeWarning, ReasonContainerGCFailed, err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-g.clock.After(period):
		}
	}
}

type unitKey struct{ uid, name string }

// unit is one container of one pod: its removable dead instances, newest
// first, and how many dead instances are kept whatever the policy.
type unit struct {
	removable []runtime.ContainerStatus
	keptDead  int
}

// GarbageCollect removes the dead containers beyond the policy's limits,
// oldest first.
func (g *ContainerGC) GarbageCollect(ctx context.Context) error {
	all, err := g.containers.ListContainers(ctx, "")
	if err != nil {
		return err
	}
	units := g.units(all, g.clock.Now())
	var errs []error
	remove := func(sts []runtime.ContainerStatus) {
		for _, st := range sts {
			log.WithFields(log.Fields{"container": st.ID, "name": st.Name, "uid": st.PodUID, "attempt": st.Attempt}).Info("removing dead container")
			if err := g.containers.RemoveContainer(ctx, st.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// keepPerUnit trims every unit to keep dead instances, those kept
	// whatever the policy counting.
	keepPerUnit := func(keep int) {
		for _, u := range units {
			n := max(keep-u.keptDead, 0)
			if len(u.removable) > n {
				remove(u.removable[n:])
				u.removable = u.removable[:n]
			}
		}
	}
	if g.policy.MaxPerPodContainer >= 0 {
		keepPerUnit(g.policy.MaxPerPodContainer)
	}
	dead := func() int {
		n := 0
		for _, u := range units {
			n += u.keptDead + len(u.removable)
		}
		return n
	}
	if limit := g.policy.MaxContainers; limit >= 0 && dead() > limit && len(units) > 0 {
		// A fair share per container first, then the oldest on the node.
		keepPerUnit(max(limit/len(units), 1))
		if over := dead() - limit; over > 0 {
			var flat []runtime.ContainerStatus
			for _, u := range units {
				flat = append(flat, u.removable...)
			}
			sort.SliceStable(flat, func(i, j int) bool { return flat[i].CreatedAt.Before(flat[j].CreatedAt) })
			remove(flat[:min(over, len(flat))])
		}
	}
	return errors.Join(errs...)
}

// units groups the containers by pod and name, each newest first.
func (g *ContainerGC) units(all []runtime.ContainerStatus, now time.Time) map[unitKey]*unit {
	byKey := map[unitKey][]runtime.ContainerStatus{}
	for _, st := range all {
		if st.PodUID == "" {
			continue
		}
		k := unitKey{st.PodUID, st.Name}
		byKey[k] = append(byKey[k], st)
	}
	units := make(map[unitKey]*unit, len(byKey))
	for k, sts := range byKey {
		sort.SliceStable(sts, func(i, j int) bool {
			if sts[i].Attempt != sts[j].Attempt {
				return sts[i].Attempt > sts[j].Attempt
			}
			return sts[i].CreatedAt.After(sts[j].CreatedAt)
		})
		u := &unit{}
		for i, st := range sts {
			dead := st.State != runtime.StateRunning
			switch {
			case i < 2:
				// The current instance and the one before it: status.
				if dead {
					u.keptDead++
				}
			case !dead, now.Sub(st.CreatedAt) < g.policy.MinAge:
				// Not evictable yet, and not counted, as the kubelet counts.
			default:
				u.removable = append(u.removable, st)
			}
		}
		units[k] = u
	}
	return units
}

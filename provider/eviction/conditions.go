package eviction

import (
	"time"

	"github.com/hostlet/hostlet/provider/node"
	v1 "k8s.io/api/core/v1"
)

// nodeConditions are the pressure conditions the thresholds drive, as the
// kubelet's: every threshold met, soft ones whatever their grace period,
// and those acted on that have not got back above their minimum reclaim
// (the kubelet's thresholdsNotYetResolved).
func nodeConditions(met []threshold) map[v1.NodeConditionType]bool {
	out := map[v1.NodeConditionType]bool{}
	for _, t := range met {
		if c := node.Condition(t.Signal); c != "" {
			out[c] = true
		}
	}
	return out
}

// observeConditions records when each condition was last observed and
// keeps those observed within the pressure transition period, so a
// condition does not flap; it reports whether the set changed.
func (m *Manager) observeConditions(observed map[v1.NodeConditionType]bool, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range observed {
		m.conditionsLastObserved[c] = now
	}
	on := map[v1.NodeConditionType]bool{}
	for c, at := range m.conditionsLastObserved {
		if now.Sub(at) < m.cfg.PressureTransitionPeriod {
			on[c] = true
		} else {
			delete(m.conditionsLastObserved, c)
		}
	}
	changed := len(on) != len(m.conditions)
	for c := range on {
		changed = changed || !m.conditions[c]
	}
	m.conditions = on
	return changed
}

// UnderPressure reports whether the node is under the pressure condition
// (MemoryPressure, DiskPressure, PIDPressure) as of the last round: the
// kubelet's IsUnderMemoryPressure and its kin, which the node's status
// reads.
func (m *Manager) UnderPressure(c v1.NodeConditionType) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conditions[c]
}

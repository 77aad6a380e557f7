package lifecycle

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// IsSidecar reports an init container with restartPolicy Always.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// ShouldRestart decides whether a container that exited with exitCode is
// started again: its restartPolicyRules first, then its own restartPolicy,
// then the pod's (ContainerRestartRules, on by default in 1.35).
func ShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes != nil && exitCodeMatches(rule.ExitCodes, exitCode) {
				if rule.Action == v1.ContainerRestartRuleActionRestart {
					return true
				}
				break
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

func exitCodeMatches(r *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := slices.Contains(r.Values, code)
	if r.Operator == v1.ContainerRestartRuleOnExitCodesOpNotIn {
		return !in
	}
	return in
}

// Backoff is the kubelet's crash-loop back-off for one container: the first
// restart is immediate, then each waits twice as long as the one before, up
// to Max; a container that ran cleanly for ResetAfter starts over.
type Backoff struct {
	Initial, Max, ResetAfter time.Duration
}

// DefaultBackoff is the kubelet's: 10 s doubling to 300 s, reset after 10 min.
var DefaultBackoff = Backoff{Initial: 10 * time.Second, Max: 300 * time.Second, ResetAfter: 10 * time.Minute}

// backoffState is kept per container across its restarts.
type backoffState struct {
	// delay is the wait applied before the next restart; zero means none yet.
	delay time.Duration
}

// next returns when a container that finished at finished (having started
// at started) may start again and the delay that implies, and advances the
// state for the restart after.
func (b Backoff) next(st *backoffState, started, finished time.Time) (time.Time, time.Duration) {
	if !started.IsZero() && finished.Sub(started) >= b.ResetAfter {
		st.delay = 0
	}
	applied := st.delay
	b.advance(st)
	return finished.Add(applied), applied
}

func (b Backoff) advance(st *backoffState) {
	switch {
	case st.delay == 0:
		st.delay = b.Initial
	case st.delay*2 > b.Max:
		st.delay = b.Max
	default:
		st.delay *= 2
	}
}

// afterProbeKill is next for a container its liveness or startup probe
// killed (cur) at now. The kubelet kills and restarts such a container in
// one sync and judges the back-off by the newest instance that had exited
// before the kill (prev, if any), not by the one it just killed: with none
// the restart is immediate and starts no back-off, and when prev finished
// longer ago than the current delay the restart is immediate too (the delay
// still grows). Only otherwise does the killed instance wait, as a crashed
// one would.
func (b Backoff) afterProbeKill(st *backoffState, prev *ContainerInfo, cur ContainerInfo, now time.Time) (time.Time, time.Duration) {
	if !cur.StartedAt.IsZero() && cur.FinishedAt.Sub(cur.StartedAt) >= b.ResetAfter {
		st.delay = 0
	}
	if prev == nil || !prev.Exited {
		return cur.FinishedAt, 0
	}
	if st.delay == 0 || now.Sub(prev.FinishedAt) >= st.delay {
		b.advance(st)
		return cur.FinishedAt, 0
	}
	return b.next(st, cur.StartedAt, cur.FinishedAt)
}

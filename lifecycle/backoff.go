package lifecycle

import "time"

// The three back-off policies of a pod worker: the crash-loop back-off of a
// container that exited or whose process could not start (Backoff), the
// retry of a container that could not be created (pullRetry for images,
// syncRetry for the rest), and the retry
// of a pod sandbox that could not be set up (sandboxRetry, also the restart
// of a worker after a panic).

// Backoff is the kubelet's crash-loop back-off for one container: the first
// restart is immediate, then each waits twice as long as the one before, up
// to Max; a container that ran cleanly for ResetAfter starts over. The
// kubelet's values are DefaultBackoff (initialCrashLoopBackOff,
// MaxContainerBackOff and the 10 min reset of pkg/kubelet); Max is
// --max-container-restart-period. Image pulls retry with the same cap
// (pullRetry).
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
	if ran(started, finished) >= b.ResetAfter {
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
	if ran(cur.StartedAt, cur.FinishedAt) >= b.ResetAfter {
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

// ran is how long an instance ran: nothing for one whose process never
// started, whose startedAt is unset or, for a StartError, the Unix epoch as
// the kubelet reports it (taken for a run of 56 years, such a container's
// back-off started over at every failure: hundreds of restarts a minute).
func ran(started, finished time.Time) time.Duration {
	if started.Unix() <= 0 || finished.Before(started) {
		return 0
	}
	return finished.Sub(started)
}

// retry is a plain exponential retry of a step that failed: initial, then
// twice the previous delay, up to max.
type retry struct {
	initial, max time.Duration
}

// next is the delay after cur (zero: the first failure).
func (r retry) next(cur time.Duration) time.Duration {
	switch {
	case cur == 0:
		return r.initial
	case cur*2 > r.max:
		return r.max
	}
	return cur * 2
}

// sandboxRetry retries a failed sandbox setup (network, pod files). The
// kubelet retries the whole failed pod sync after 10 s (backOffPeriod,
// jittered); hostlet starts at 1 s, doubling to 30 s, as a transient CNI or
// disk error should cost little.
var sandboxRetry = retry{initial: time.Second, max: 30 * time.Second}

// NetworkNotReady is the sandbox failure of a pod waiting for the pod
// network (the kubelet's event reason). The kubelet retries such a pod after
// 1 s (backOffOnTransientErrorPeriod) every time, not backing off, as the
// network may be ready any moment; so does hostlet.
const NetworkNotReady = "NetworkNotReady"

// pullRetry is the kubelet's image pull back-off (ImagePullBackOff):
// imageBackOffPeriod 10 s doubling to MaxImageBackOff, which hostlet takes
// from the crash-loop cap (300 s by default, as the kubelet's).
func (b Backoff) pullRetry() retry { return retry{initial: 10 * time.Second, max: b.Max} }

// syncRetry retries a container that could not be created
// (CreateContainerConfigError: a missing ConfigMap or Secret;
// CreateContainerError): nothing of it was made that could crash-loop, and
// the kubelet's pod worker retries such a failed sync after backOffPeriod,
// 10 s, each time (jittered up to 15 s): soon enough to pick up the object
// created late, never sooner.
var syncRetry = retry{initial: 10 * time.Second, max: 10 * time.Second}

// startRetry is the retry after a failed start that made no container, by
// its waiting reason. RunContainerError is not one of them: it goes
// through the crash-loop back-off (crashLoops).
func (b Backoff) startRetry(reason string) retry {
	if reason == "ErrImagePull" {
		return b.pullRetry()
	}
	return syncRetry
}

// crashLoops reports the start failures that back off as a crash does:
// the container's process could not be run (RunContainerError, with the
// kubelet a container that exited, StartError, whose next start
// doBackOff holds back).
func crashLoops(reason string) bool { return reason == "RunContainerError" }

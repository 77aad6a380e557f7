package lifecycle

import (
	"testing"
	"time"
)

// A container its liveness probe kills every 2 s is restarted on the
// kubelet's schedule: the back-off is judged by the instance that had exited
// before each kill, so the first two restarts are immediate and the waits
// then grow from the killed instance's exit: 0, 0, 10, 20, 40 s. A crashing
// container waits 0, 10, 20, 40 s (TestBackoffSchedule).
func TestBackoffAfterProbeKill(t *testing.T) {
	b := DefaultBackoff
	var st backoffState
	var prev *ContainerInfo
	start := time.Unix(1000, 0)
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		cur := ContainerInfo{Exited: true, StartedAt: start, FinishedAt: start.Add(2200 * time.Millisecond)}
		now := cur.FinishedAt.Add(10 * time.Millisecond)
		at, applied := b.afterProbeKill(&st, prev, cur, now)
		if at.Sub(cur.FinishedAt) != applied {
			t.Fatalf("restart at %v is not finished+%v", at, applied)
		}
		waits = append(waits, applied)
		prev = &cur
		start = now
		if at.After(now) {
			start = at
		}
	}
	want := []time.Duration{0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}

	// A kill long after the previous exit (past the current delay) restarts
	// at once, and the delay still grows.
	st = backoffState{delay: 10 * time.Second}
	old := ContainerInfo{Exited: true, FinishedAt: time.Unix(0, 0)}
	cur := ContainerInfo{Exited: true, StartedAt: time.Unix(5, 0), FinishedAt: time.Unix(60, 0)}
	if _, applied := b.afterProbeKill(&st, &old, cur, time.Unix(60, 0)); applied != 0 || st.delay != 20*time.Second {
		t.Fatalf("applied %v, delay %v; want 0 and 20s", applied, st.delay)
	}
}

package lifecycle

import (
	"slices"
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

func TestBackoffSchedule(t *testing.T) {
	b := DefaultBackoff
	var st backoffState
	start := time.Unix(1000, 0)
	var delays []time.Duration
	for i := 0; i < 8; i++ {
		finished := start.Add(time.Second)
		at, applied := b.next(&st, start, finished)
		if at.Sub(finished) != applied {
			t.Fatalf("restart at %v is not finished+%v", at, applied)
		}
		delays = append(delays, applied)
		start = at
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays = %v, want %v", delays, want)
		}
	}
	// Ten minutes of clean running resets the back-off.
	at, applied := b.next(&st, start, start.Add(11*time.Minute))
	if applied != 0 || !at.Equal(start.Add(11*time.Minute)) {
		t.Fatalf("after a long run: applied %v, want 0", applied)
	}
	// A shortened cap is honoured.
	b.Max = 15 * time.Second
	st = backoffState{}
	var got []time.Duration
	for i := 0; i < 4; i++ {
		_, d := b.next(&st, time.Time{}, time.Unix(0, 0))
		got = append(got, d)
	}
	if got[3] != 15*time.Second || got[2] != 15*time.Second {
		t.Fatalf("capped delays = %v", got)
	}
}

// The retry policies of failed steps: image pulls 10 s doubling to the
// crash-loop cap, containers that could not be made 10 s each time (the
// kubelet's pod sync retry), sandbox setups 1 s to 30 s.
func TestRetryPolicies(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    retry
		want []time.Duration
	}{
		{"image pull", DefaultBackoff.startRetry("ErrImagePull"), []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}},
		{"config error", DefaultBackoff.startRetry("CreateContainerConfigError"), []time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"create error", DefaultBackoff.startRetry("CreateContainerError"), []time.Duration{10 * time.Second, 10 * time.Second}},
		{"image pull, shorter cap", Backoff{Initial: 10 * time.Second, Max: 30 * time.Second}.pullRetry(), []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"sandbox", sandboxRetry, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
	} {
		var d time.Duration
		var got []time.Duration
		for range tc.want {
			d = tc.r.next(d)
			got = append(got, d)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: delays %v, want %v", tc.name, got, tc.want)
		}
	}
}

// An instance whose process never ran (a StartError's startedAt is the Unix
// epoch, or none) ran for no time: its failure never starts the back-off
// over, however long ago 1970 was.
func TestBackoffNeverResetByAStartError(t *testing.T) {
	b := DefaultBackoff
	var st backoffState
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []time.Duration
	for _, started := range []time.Time{time.Unix(0, 0), {}, time.Unix(0, 0), time.Unix(0, 0)} {
		_, d := b.next(&st, started, now)
		got = append(got, d)
		now = now.Add(d)
	}
	if want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	if d := ran(now, now.Add(-time.Second)); d != 0 {
		t.Errorf("a finish before the start ran %v", d)
	}
}

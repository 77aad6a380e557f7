package main

import (
	"strings"
	"testing"
	"time"
)

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		a, b          float64
		better, f, in string
	}{
		{1, 3, "faster", "0.33", "3.0× faster"},
		{3, 1, "lighter", "3.00", "3.0× heavier"},
		{1, 1.02, "fewer", "0.98", "same"},
		{0, 5, "faster", "", ""},
		{2, 1, "", "", ""},
	} {
		if f, in := ratio(c.a, c.b, c.better); f != c.f || in != c.in {
			t.Errorf("ratio(%v, %v, %q) = %q, %q; want %q, %q", c.a, c.b, c.better, f, in, c.f, c.in)
		}
	}
}

func TestLostPods(t *testing.T) {
	r := &nodeResult{}
	r.rounds = []roundCount{{"a", 30, 30, 30}, {"b", 30, 29, 29}, {"c", 30, 30, 28}}
	if n := r.lost(); n != 4 {
		t.Errorf("lost = %d, want 4 (one never Running nor gone, two never gone)", n)
	}
	tbl := roundsTable([]string{"hostlet"}, []*nodeResult{r})
	if !strings.Contains(tbl, "| a | 30 / 30 / 30 |") || !strings.Contains(tbl, "| b | 30 / 29 / 29 LOST |") {
		t.Errorf("rounds table:\n%s", tbl)
	}
}

func TestTableRatioColumns(t *testing.T) {
	h := &nodeResult{start: dist{time.Second}, window: time.Minute}
	k := &nodeResult{start: dist{3 * time.Second}, window: time.Minute}
	tbl := table(config{pods: 1, rounds: 1}, []string{"hostlet", "kubelet"}, []*nodeResult{h, k})
	if !strings.Contains(tbl, "| burst of 1 pods: create → Running, p50 | 1000 ms | 3000 ms | 0.33 | 3.0× faster |") {
		t.Errorf("table:\n%s", tbl)
	}
}

func TestPace(t *testing.T) {
	var d dist
	for i := range 100 {
		d = append(d, time.Duration(1000+i*100)*time.Millisecond)
	}
	// p10 is the 10th pod (1.9 s), p90 the 90th (9.9 s): 80 pods apart.
	if got := d.pace(); got != 100*time.Millisecond {
		t.Errorf("pace = %v, want 100ms", got)
	}
	if got := (dist{time.Second}).pace(); got != 0 {
		t.Errorf("pace of one pod = %v, want 0", got)
	}
}

func TestBusy(t *testing.T) {
	u := cpuUse{machine: machineUse{busy: 3 * time.Second, total: 4 * time.Second}}
	if got := u.busy(); got < 0.749 || got > 0.751 {
		t.Fatalf("busy = %v, want 0.75", got)
	}
	// Two rounds, all busy for 1 s then half busy for 3 s: 2.5 of 4 s.
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	mark := func(busy, total float64) cpuMark {
		return cpuMark{machine: machineUse{busy: sec(busy), total: sec(total)}}
	}
	var total cpuUse
	total.add(mark(5, 10), mark(6, 11))
	total.add(mark(6, 20), mark(7.5, 23))
	if got := total.busy(); got < 0.624 || got > 0.626 {
		t.Fatalf("busy over two rounds = %v, want 0.625", got)
	}
	if (cpuUse{}).busy() != 0 {
		t.Fatal("an empty span is busy")
	}
}

func TestForksSummed(t *testing.T) {
	mark := func(forks uint64) cpuMark { return cpuMark{machine: machineUse{total: time.Hour, forks: forks}} }
	var u cpuUse
	u.add(mark(1000), mark(1400))
	u.add(mark(2000), mark(2100))
	u.add(mark(3000), cpuMark{}) // the later read failed
	if u.machine.forks != 500 {
		t.Fatalf("forks = %d, want 500", u.machine.forks)
	}
}

func TestOthersLeaveOutEveryGroup(t *testing.T) {
	mark := func(agent, runtime, control, pods, busy time.Duration) cpuMark {
		return cpuMark{agent, runtime, control, pods, machineUse{busy: busy, total: time.Minute}}
	}
	var u cpuUse
	u.add(mark(1*time.Second, 2*time.Second, 3*time.Second, 4*time.Second, 10*time.Second),
		mark(2*time.Second, 4*time.Second, 6*time.Second, 8*time.Second, 21*time.Second))
	if u.controlPlane != 3*time.Second || u.pods != 4*time.Second {
		t.Fatalf("control plane %v, pods %v; want 3s, 4s", u.controlPlane, u.pods)
	}
	// 11 s busy: 1 agent, 2 runtime, 3 control plane, 4 pods, 1 the rest.
	if got := u.others(); got != time.Second {
		t.Fatalf("others = %v, want 1s", got)
	}
}

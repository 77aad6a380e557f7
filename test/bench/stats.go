package main

import (
	"sort"
	"time"
)

// dist is a set of latencies.
type dist []time.Duration

// latencies pairs each pod's end time with its start time.
func latencies(start, end map[string]time.Time) dist {
	var d dist
	for n, e := range end {
		if s, ok := start[n]; ok {
			d = append(d, e.Sub(s))
		}
	}
	sortDist(d)
	return d
}

func sortDist(d dist) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// pct is the nearest-rank percentile p (0-100).
func (d dist) pct(p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[max(0, min(d.rank(p), len(d)-1))]
}

// rank is the index of the nearest-rank percentile p in d.
func (d dist) rank(p int) int { return (p*len(d)+99)/100 - 1 }

// pace is the time between two pods reaching the end in the middle of a
// burst, from the 10th to the 90th percentile: the node's steady rate,
// apart from the first pod's latency and the last ones' tail. Pods created
// together (a burst) make it the node's throughput.
func (d dist) pace() time.Duration {
	n := d.rank(90) - d.rank(10)
	if n <= 0 {
		return 0
	}
	return (d.pct(90) - d.pct(10)) / time.Duration(n)
}

// span is from the earliest start to the latest end: "all done".
func span(start, end map[string]time.Time) time.Duration {
	var first, last time.Time
	for _, s := range start {
		if first.IsZero() || s.Before(first) {
			first = s
		}
	}
	for _, e := range end {
		if e.After(last) {
			last = e
		}
	}
	return last.Sub(first)
}

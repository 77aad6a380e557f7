package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// gone is the tracker condition met by a pod's Deleted event.
const gone = "gone"

// cond is a pod state to wait for, like harness.PodReady; an error (e.g.
// the pod terminated before getting Ready) just means not met.
type cond func(*v1.Pod) (bool, error)

// tracker watches one measurement's pods and records, per condition, when
// each pod was first seen meeting it: the receive time of the watch event,
// i.e. when an API client learns about it.
type tracker struct {
	conds   map[string]cond
	watch   func(rv string) (watch.Interface, error)
	ctx     context.Context
	stop    context.CancelFunc
	mu      sync.Mutex
	err     error                           // why the watch ended, if not stopped
	first   map[string]map[string]time.Time // condition -> pod -> time
	last    map[string]*v1.Pod
	changed chan struct{} // closed and replaced on every event
	done    chan struct{} // closed when the watch ends
}

// track starts watching the pods labelled for scenario in ns. It returns
// once the watch is established, so pods created afterwards are seen from
// their first event.
func track(ctx context.Context, cs kubernetes.Interface, ns, scenario string, conds map[string]cond) (*tracker, error) {
	sel := scenarioLabel + "=" + scenario
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	t := &tracker{conds: conds, first: map[string]map[string]time.Time{}, last: map[string]*v1.Pod{},
		changed: make(chan struct{}), done: make(chan struct{})}
	t.ctx, t.stop = context.WithCancel(ctx)
	t.watch = func(rv string) (watch.Interface, error) {
		return cs.CoreV1().Pods(ns).Watch(t.ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv})
	}
	w, err := t.watch(l.ResourceVersion)
	if err != nil {
		t.stop()
		return nil, err
	}
	for c := range conds {
		t.first[c] = map[string]time.Time{}
	}
	t.first[gone] = map[string]time.Time{}
	go t.run(w, l.ResourceVersion)
	return t, nil
}

// run consumes the watch; when the apiserver closes it (it may, e.g. a
// watcher it finds too slow on a loaded machine) it resumes from the last
// resource version seen, so no event is lost.
func (t *tracker) run(w watch.Interface, rv string) {
	defer close(t.done)
	for {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				t.fail(fmt.Errorf("watch error: %v", apierrors.FromObject(ev.Object)))
				w.Stop()
				return
			}
			if p, ok := ev.Object.(*v1.Pod); ok {
				rv = p.ResourceVersion
				t.event(ev.Type, p, time.Now())
			}
		}
		if t.ctx.Err() != nil {
			return
		}
		log.Debugf("pod watch closed by the apiserver, resuming from %s", rv)
		var err error
		if w, err = t.watch(rv); err != nil {
			t.fail(fmt.Errorf("re-watch from %s: %w", rv, err))
			return
		}
	}
}

func (t *tracker) fail(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
}

// event records which conditions p meets as of at.
func (t *tracker) event(typ watch.EventType, p *v1.Pod, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last[p.Name] = p
	if typ == watch.Deleted {
		t.record(gone, p.Name, at)
	} else {
		for c, f := range t.conds {
			if ok, err := f(p); ok && err == nil {
				t.record(c, p.Name, at)
			}
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *tracker) record(cond, pod string, at time.Time) {
	if _, seen := t.first[cond][pod]; !seen {
		t.first[cond][pod] = at
	}
}

// wait blocks until every pod in names has met cond, and returns when each
// first did. On timeout the error lists the pods still missing.
func (t *tracker) wait(ctx context.Context, cond string, names []string, timeout time.Duration) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		t.mu.Lock()
		got := map[string]time.Time{}
		var missing []string
		for _, n := range names {
			if at, ok := t.first[cond][n]; ok {
				got[n] = at
			} else {
				missing = append(missing, n)
			}
		}
		ch := t.changed
		t.mu.Unlock()
		if len(missing) == 0 {
			return got, nil
		}
		select {
		case <-ch:
		case <-t.done:
			t.mu.Lock()
			defer t.mu.Unlock()
			return nil, fmt.Errorf("watch ended while waiting for %s: %v", cond, t.err)
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, &notMetError{fmt.Sprintf("%d of %d pods not %s after %v: %s", len(missing), len(names), cond, timeout, t.status(missing))}
			}
			return nil, ctx.Err()
		}
	}
}

// notMetError says which pods did not meet a condition in time.
type notMetError struct{ msg string }

func (e *notMetError) Error() string { return e.msg }

// status describes the last seen state of a few pods.
func (t *tracker) status(names []string) string {
	sort.Strings(names)
	if len(names) > 5 {
		names = names[:5]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var s []string
	for _, n := range names {
		if p := t.last[n]; p != nil {
			s = append(s, describe(p))
		} else {
			s = append(s, n+" (no event)")
		}
	}
	return strings.Join(s, "; ")
}

// pod is the last state seen of a pod (an empty pod if none was seen).
func (t *tracker) pod(name string) *v1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.last[name]; p != nil {
		return p
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// times is when each pod first met cond, so far.
func (t *tracker) times(cond string) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Time{}
	for n, at := range t.first[cond] {
		out[n] = at
	}
	return out
}

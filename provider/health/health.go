// Package health is hostlet's own liveness, as the kubelet reports its
// own: named checks the parts of the node report into (a heartbeat, the
// state of a stream, the work in flight), read by /healthz (the healthz
// port and the kubelet API, listed with ?verbose as the kubelet's) and by
// the systemd watchdog, which is pinged only while every check passes.
//
// The kubelet fails its syncloop check when its sync loop has not come
// round for 5 minutes, and its PLEG when the last relist is older than 3
// minutes. hostlet has no loop and no relist: its pods are handed to their
// workers from a queue (the "syncloop" check watches that no handoff
// hangs), containerd tells it of exits on an event stream ("pleg": the
// stream is not broken for long), and containerd must answer ("runtime",
// the kubelet's 30 s runtime sync threshold).
package health

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/utils/clock"
)

// The kubelet's thresholds.
const (
	// SyncLoopThreshold: the kubelet's syncloop check fails after twice
	// its resync interval, at least 5 minutes.
	SyncLoopThreshold = 5 * time.Minute
	// PLEGThreshold is the generic PLEG's relist threshold.
	PLEGThreshold = 3 * time.Minute
	// RuntimeThreshold is the kubelet's runtime sync threshold (the runtime
	// is down when it has not answered for that long); RuntimePeriod how
	// often the kubelet asks it (updateRuntimeUp).
	RuntimeThreshold = 30 * time.Second
	RuntimePeriod    = 5 * time.Second
)

// Checks are the node's named health checks, in the order they are added.
type Checks struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	list  []healthz.HealthChecker
}

// New makes an empty set of checks with ping, the kubelet's first one.
func New(clk clock.PassiveClock) *Checks {
	return &Checks{clock: clk, list: []healthz.HealthChecker{healthz.PingHealthz}}
}

// Add adds a check of its own.
func (c *Checks) Add(name string, check func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, healthz.NamedCheck(name, func(*http.Request) error { return check() }))
}

// Checkers are the checks as /healthz serves them.
func (c *Checks) Checkers() []healthz.HealthChecker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]healthz.HealthChecker(nil), c.list...)
}

// Healthy is nil when every check passes, else the first failure named by
// its check (what the watchdog logs when it does not ping).
func (c *Checks) Healthy() error {
	for _, ch := range c.Checkers() {
		if err := ch.Check(nil); err != nil {
			return fmt.Errorf("%s: %w", ch.Name(), err)
		}
	}
	return nil
}

// transitions logs a check's passing to failing and back once each, with
// the reason /healthz withholds.
type transitions struct {
	name    string
	mu      sync.Mutex
	failing bool
}

func (t *transitions) report(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil && !t.failing:
		log.WithError(err).WithField("check", t.name).Warn("health check failing")
	case err == nil && t.failing:
		log.WithField("check", t.name).Info("health check passing again")
	}
	t.failing = err != nil
	return err
}

// Heartbeat is a check that passes while Beat was called within its
// threshold (from its creation on: a part is given its threshold to start).
type Heartbeat struct {
	clock     clock.PassiveClock
	threshold time.Duration
	what      string
	t         transitions
	mu        sync.Mutex
	last      time.Time
	lastErr   error
}

// Heartbeat adds a heartbeat check; what names what beats in its message.
func (c *Checks) Heartbeat(name, what string, threshold time.Duration) *Heartbeat {
	h := &Heartbeat{clock: c.clock, threshold: threshold, what: what, t: transitions{name: name}, last: c.clock.Now()}
	c.Add(name, h.check)
	return h
}

// Beat says the part made progress now.
func (h *Heartbeat) Beat() {
	h.mu.Lock()
	h.last, h.lastErr = h.clock.Now(), nil
	h.mu.Unlock()
}

// Failed records why the part did not make progress, for the message once
// the threshold passes.
func (h *Heartbeat) Failed(err error) {
	h.mu.Lock()
	h.lastErr = err
	h.mu.Unlock()
}

func (h *Heartbeat) check() error {
	h.mu.Lock()
	elapsed, lastErr := h.clock.Since(h.last), h.lastErr
	h.mu.Unlock()
	var err error
	if elapsed > h.threshold {
		err = fmt.Errorf("%s was last seen active %v ago; threshold is %v", h.what, elapsed.Round(time.Millisecond), h.threshold)
		if lastErr != nil {
			err = fmt.Errorf("%w: %w", err, lastErr)
		}
	}
	return h.t.report(err)
}

// Stream is a check on a stream that is up or broken: it fails once the
// stream has been broken (or not yet up) for longer than the threshold;
// reconnecting within it is normal.
type Stream struct {
	clock     clock.PassiveClock
	threshold time.Duration
	what      string
	t         transitions
	mu        sync.Mutex
	up        bool
	since     time.Time // of the current state
	err       error     // why it broke
}

// Stream adds a stream check, broken (not yet up) from now.
func (c *Checks) Stream(name, what string, threshold time.Duration) *Stream {
	s := &Stream{clock: c.clock, threshold: threshold, what: what, t: transitions{name: name}, since: c.clock.Now(),
		err: fmt.Errorf("not yet subscribed")}
	c.Add(name, s.check)
	return s
}

// Set says the stream is up (err nil) or broken.
func (s *Stream) Set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	up := err == nil
	if up != s.up {
		s.up, s.since = up, s.clock.Now()
	}
	s.err = err
}

func (s *Stream) check() error {
	s.mu.Lock()
	up, down, cause := s.up, s.clock.Since(s.since), s.err
	s.mu.Unlock()
	var err error
	if !up && down > s.threshold {
		err = fmt.Errorf("%s broken for %v; threshold is %v: %w", s.what, down.Round(time.Millisecond), s.threshold, cause)
	}
	return s.t.report(err)
}

// Progress is a check on work handed out one item at a time: it fails
// while an item has been in hand longer than the threshold (a handler
// that hangs stalls its queue), as the kubelet's syncloop check fails
// when one iteration of its loop takes too long.
type Progress struct {
	clock     clock.PassiveClock
	threshold time.Duration
	what      string
	t         transitions
	mu        sync.Mutex
	next      uint64
	inHand    map[uint64]time.Time
}

// Progress adds a progress check; what names the work in its message.
func (c *Checks) Progress(name, what string, threshold time.Duration) *Progress {
	p := &Progress{clock: c.clock, threshold: threshold, what: what, t: transitions{name: name}, inHand: map[uint64]time.Time{}}
	c.Add(name, p.check)
	return p
}

// Begin says an item is in hand; the returned func says it is done.
func (p *Progress) Begin() (done func()) {
	p.mu.Lock()
	id := p.next
	p.next++
	p.inHand[id] = p.clock.Now()
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.inHand, id)
		p.mu.Unlock()
	}
}

func (p *Progress) check() error {
	p.mu.Lock()
	var oldest time.Time
	for _, t := range p.inHand {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	p.mu.Unlock()
	var err error
	if !oldest.IsZero() {
		if took := p.clock.Since(oldest); took > p.threshold {
			err = fmt.Errorf("%s took longer than expected: one has been in hand for %v; threshold is %v", p.what, took.Round(time.Millisecond), p.threshold)
		}
	}
	return p.t.report(err)
}

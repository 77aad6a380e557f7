package main

import (
	"sync"
	"time"
)

// health is the switch shared by /healthz and the gRPC health service.
type health struct {
	mu      sync.Mutex
	on      bool
	readyAt time.Time     // not healthy before this, whatever the switch says
	changed chan struct{} // closed and replaced on every change, for gRPC Watch
	now     func() time.Time
}

func newHealth(on bool, start time.Time, after time.Duration) *health {
	h := &health{on: on, readyAt: start.Add(after), changed: make(chan struct{}), now: time.Now}
	if after > 0 {
		// Wake watchers when the delay ends, as that can flip the status.
		time.AfterFunc(time.Until(h.readyAt), h.notify)
	}
	return h
}

func (h *health) healthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.on && !h.now().Before(h.readyAt)
}

func (h *health) set(on bool) {
	h.mu.Lock()
	h.on = on
	h.mu.Unlock()
	h.notify()
}

func (h *health) notify() {
	h.mu.Lock()
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// watch returns the current status and a channel closed on the next change.
func (h *health) watch() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.on && !h.now().Before(h.readyAt), h.changed
}

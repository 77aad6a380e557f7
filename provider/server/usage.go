package server

import (
	"sync"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"k8s.io/utils/clock"
)

// usagePeriod is how old a disk usage figure may be, as the kubelet's
// --volume-stats-agg-period (1m): walking every emptyDir, log dir and
// writable layer on each /stats/summary scrape would cost a disk walk per
// scrape and make a slow disk slow every scrape.
const usagePeriod = time.Minute

// usageCache serves disk usage measured in the background: the first ask
// for a path measures it, later asks get the last figure and, when it is
// older than usagePeriod, start one new measurement. Paths no one asked for
// in two periods are forgotten, so removed pods leave nothing behind.
// The zero value is ready to use.
type usageCache struct {
	clock   clock.Clock
	mu      sync.Mutex
	entries map[string]*usageEntry
	swept   time.Time // the last forget
}

type usageEntry struct {
	usage     runtime.DiskUsage
	err       error
	measured  time.Time
	asked     time.Time
	measuring bool
}

func (c *usageCache) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}

// get returns key's usage, measuring it with measure on the first ask.
func (c *usageCache) get(key string, measure func() (runtime.DiskUsage, error)) (runtime.DiskUsage, error) {
	c.mu.Lock()
	now := c.now()
	if c.entries == nil {
		c.entries = map[string]*usageEntry{}
	}
	if now.Sub(c.swept) >= usagePeriod {
		c.forget(now)
	}
	e, ok := c.entries[key]
	if !ok {
		c.mu.Unlock()
		u, err := measure()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.entries[key] = &usageEntry{usage: u, err: err, measured: now, asked: now}
		return u, err
	}
	defer c.mu.Unlock()
	e.asked = now
	if !e.measuring && now.Sub(e.measured) >= usagePeriod {
		e.measuring = true
		go c.refresh(key, e, measure)
	}
	return e.usage, e.err
}

func (c *usageCache) refresh(key string, e *usageEntry, measure func() (runtime.DiskUsage, error)) {
	u, err := measure()
	c.mu.Lock()
	defer c.mu.Unlock()
	e.usage, e.err, e.measured, e.measuring = u, err, c.now(), false
}

// forget drops entries not asked for in two periods, once a period (not
// on every ask: a scrape asks once per volume and container); c.mu is held.
func (c *usageCache) forget(now time.Time) {
	c.swept = now
	for k, e := range c.entries {
		if !e.measuring && now.Sub(e.asked) > 2*usagePeriod {
			delete(c.entries, k)
		}
	}
}

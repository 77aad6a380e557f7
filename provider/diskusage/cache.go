// Package diskusage measures what pods keep on the node's disks (writable
// layers, container logs, volume directories) in the background, as the
// kubelet's cAdvisor and volume stats caches do: the stats summary and the
// eviction manager read the same figures, and a read never walks a
// directory again (a walk per scrape or eviction round would make a slow
// disk slow everything that asks).
package diskusage

import (
	"context"
	"sync"
	"time"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"k8s.io/utils/clock"
)

// DefaultPeriod is the kubelet's --volume-stats-agg-period.
const DefaultPeriod = time.Minute

// Layers measures a container's writable layer (runtime.Runtime).
type Layers interface {
	RootfsUsage(ctx context.Context, id string) (runtime.DiskUsage, error)
}

// Cache holds the last measurement of every writable layer and directory
// asked for; its Run measures them again each period and forgets those no
// one asked for in two periods, so removed pods leave nothing behind.
type Cache struct {
	layers Layers
	period time.Duration
	clock  clock.WithTicker

	mu      sync.Mutex
	entries map[key]*entry
}

type key struct {
	rootfs bool // a container ID, else a directory
	name   string
}

type entry struct {
	usage runtime.DiskUsage
	err   error
	asked time.Time
}

// New makes the cache; period is how old a figure may get.
func New(layers Layers, period time.Duration, clk clock.WithTicker) *Cache {
	return &Cache{layers: layers, period: period, clock: clk, entries: map[key]*entry{}}
}

// RootfsUsage is the container's writable layer as last measured; the
// first ask measures it at once.
func (c *Cache) RootfsUsage(ctx context.Context, id string) (runtime.DiskUsage, error) {
	return c.get(ctx, key{rootfs: true, name: id})
}

// DirUsage is the directory's usage as last measured; the first ask
// measures it at once.
func (c *Cache) DirUsage(dir string) (runtime.DiskUsage, error) {
	return c.get(context.Background(), key{name: dir})
}

func (c *Cache) get(ctx context.Context, k key) (runtime.DiskUsage, error) {
	c.mu.Lock()
	now := c.clock.Now()
	if e, ok := c.entries[k]; ok {
		e.asked = now
		c.mu.Unlock()
		return e.usage, e.err
	}
	c.mu.Unlock()
	// The measurement may outlive the asker's request: not its deadline.
	u, err := c.measure(context.WithoutCancel(ctx), k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok { // measured meanwhile by another ask
		e.asked = now
		return e.usage, e.err
	}
	c.entries[k] = &entry{usage: u, err: err, asked: now}
	return u, err
}

func (c *Cache) measure(ctx context.Context, k key) (runtime.DiskUsage, error) {
	if k.rootfs {
		return c.layers.RootfsUsage(ctx, k.name)
	}
	return runtime.DirUsage(k.name)
}

// Run measures everything asked for again every period until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	t := c.clock.NewTicker(c.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.refresh(ctx)
		}
	}
}

// refresh forgets what no one asked for in two periods and measures the
// rest, one at a time, outside the lock: readers get the previous figure
// meanwhile.
func (c *Cache) refresh(ctx context.Context) {
	now := c.clock.Now()
	c.mu.Lock()
	var keys []key
	for k, e := range c.entries {
		if now.Sub(e.asked) > 2*c.period {
			delete(c.entries, k)
			continue
		}
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		u, err := c.measure(ctx, k)
		if err != nil {
			log.WithError(err).WithField("path", k.name).Debug("disk usage")
		}
		c.mu.Lock()
		if e, ok := c.entries[k]; ok {
			e.usage, e.err = u, err
		}
		c.mu.Unlock()
	}
}

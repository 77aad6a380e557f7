// Package gc is the kubelet's garbage collection of unused images and dead
// containers: what to remove and when. What exists and the removal itself
// are the runtime's.
package gc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// The kubelet's event reasons.
const (
	ReasonImageGCFailed       = "ImageGCFailed"
	ReasonFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	ReasonInvalidDiskCapacity = "InvalidDiskCapacity"
	ReasonContainerGCFailed   = "ContainerGCFailed"
)

// Images is what image GC needs of the runtime.
type Images interface {
	ListImages(ctx context.Context) ([]runtime.StoredImage, error)
	RemoveImage(ctx context.Context, id string) error
	ImageFsUsage(ctx context.Context) (capacity, available int64, err error)
}

// ImagePolicy is the kubelet's image GC policy.
type ImagePolicy struct {
	// Usage of the image filesystem (percent) at or above High starts a
	// collection that frees space down to Low.
	HighThresholdPercent, LowThresholdPercent int
	// MinAge: an image is not removed for space before it was known that
	// long. MaxAge (0: off): an image unused that long is removed whatever
	// the space.
	MinAge, MaxAge time.Duration
}

// Validate rejects what the kubelet's configuration validation rejects.
func (p ImagePolicy) Validate() error {
	switch {
	case p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100:
		return fmt.Errorf("--image-gc-high-threshold %d must be between 0 and 100, inclusive", p.HighThresholdPercent)
	case p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100:
		return fmt.Errorf("--image-gc-low-threshold %d must be between 0 and 100, inclusive", p.LowThresholdPercent)
	case p.LowThresholdPercent >= p.HighThresholdPercent:
		return fmt.Errorf("--image-gc-low-threshold %d must be less than --image-gc-high-threshold %d", p.LowThresholdPercent, p.HighThresholdPercent)
	case p.MaxAge < 0:
		return fmt.Errorf("--image-maximum-gc-age %v must not be negative", p.MaxAge)
	case p.MaxAge > 0 && p.MaxAge <= p.MinAge:
		return fmt.Errorf("--image-maximum-gc-age %v must be greater than --image-minimum-gc-age %v", p.MaxAge, p.MinAge)
	}
	return nil
}

// Disabled is the kubelet's switch: a high threshold of 100 without a
// maximum age collects nothing.
func (p ImagePolicy) Disabled() bool { return p.HighThresholdPercent == 100 && p.MaxAge == 0 }

// imageRecord is what the runtime cannot tell: when hostlet first saw an
// image and last saw it in use. Kept in memory, as the kubelet keeps it.
type imageRecord struct {
	firstDetected, lastUsed time.Time
	size                    int64
	pinned, inUse           bool
}

// ImageGC removes unused images as the kubelet's image GC manager does.
type ImageGC struct {
	mu      sync.Mutex // one collection at a time
	images  Images
	policy  ImagePolicy
	clock   clock.Clock
	events  record.EventRecorder
	node    *v1.ObjectReference
	began   time.Time
	records map[string]*imageRecord
	// collected is the kubelet's image_garbage_collected_total, by reason
	// (age or space).
	collected *prometheus.CounterVec
	// postGC are the kubelet's post-GC hooks: after images were freed for
	// space, each gets the images left (their IDs) and when the round began.
	postGC []func(remaining []string, began time.Time)
}

// OnCollected adds a hook run after each round that freed space (the
// kubelet's postGCHooks: the pull records of images gone are pruned).
func (g *ImageGC) OnCollected(h func(remaining []string, began time.Time)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.postGC = append(g.postGC, h)
}

// runPostGC hands the hooks every image still known, those in use too:
// a record of an image in use must not go.
func (g *ImageGC) runPostGC(began time.Time) {
	if len(g.postGC) == 0 {
		return
	}
	remaining := make([]string, 0, len(g.records))
	for id := range g.records {
		remaining = append(remaining, id)
	}
	for _, h := range g.postGC {
		h(remaining, began)
	}
}

func NewImageGC(images Images, policy ImagePolicy, clk clock.Clock, events record.EventRecorder, node *v1.ObjectReference) *ImageGC {
	return &ImageGC{images: images, policy: policy, clock: clk, events: events, node: node,
		began: clk.Now(), records: map[string]*imageRecord{},
		collected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_image_garbage_collected_total",
			Help: "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
		}, []string{"reason"}),
	}
}

// Metrics are image GC's collectors, for the kubelet API's /metrics.
func (g *ImageGC) Metrics() []prometheus.Collector { return []prometheus.Collector{g.collected} }

// Run collects every period until ctx ends, from the start as the kubelet
// does. A failure is an ImageGCFailed event from the second one in a row
// (the first may be stats not ready yet).
func (g *ImageGC) Run(ctx context.Context, period time.Duration) {
	if g.policy.Disabled() {
		log.Info("image garbage collection disabled (--image-gc-high-threshold=100)")
		return
	}
	failed := false
	for {
		if err := g.GarbageCollect(ctx); err != nil {
			if failed {
				log.WithError(err).Error("image garbage collection failed multiple times in a row")
				g.events.Event(g.node, v1.EventTypeWarning, ReasonImageGCFailed, err.Error())
			} else {
				log.WithError(err).Warn("image garbage collection failed once")
			}
			failed = true
		} else {
			failed = false
		}
		select {
		case <-ctx.Done():
			return
		case <-g.clock.After(period):
		}
	}
}

// detect brings the records up to date with the runtime's images.
func (g *ImageGC) detect(ctx context.Context, now time.Time) error {
	imgs, err := g.images.ListImages(ctx)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(imgs))
	for _, img := range imgs {
		seen[img.ID] = true
		r := g.records[img.ID]
		if r == nil {
			r = &imageRecord{firstDetected: now}
			g.records[img.ID] = r
		}
		if img.InUse {
			r.lastUsed = now
		}
		r.size, r.pinned, r.inUse = img.Size, img.Pinned, img.InUse
	}
	for id := range g.records {
		if !seen[id] {
			delete(g.records, id)
		}
	}
	return nil
}

type candidate struct {
	id string
	imageRecord
}

// evictionOrder is the images GC may remove, least recently used first
// (then first detected): never one in use or pinned.
func (g *ImageGC) evictionOrder(ctx context.Context, now time.Time) ([]candidate, error) {
	if err := g.detect(ctx, now); err != nil {
		return nil, err
	}
	var out []candidate
	for id, r := range g.records {
		if r.inUse || r.pinned {
			continue
		}
		out = append(out, candidate{id: id, imageRecord: *r})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].lastUsed.Equal(out[j].lastUsed) {
			return out[i].lastUsed.Before(out[j].lastUsed)
		}
		if !out[i].firstDetected.Equal(out[j].firstDetected) {
			return out[i].firstDetected.Before(out[j].firstDetected)
		}
		return out[i].id < out[j].id
	})
	return out, nil
}

// GarbageCollect removes images unused for longer than MaxAge, then, if
// the image filesystem is used at or above the high threshold, unused
// images until it is down to the low one.
func (g *ImageGC) GarbageCollect(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	imgs, err := g.evictionOrder(ctx, now)
	if err != nil {
		return err
	}
	if imgs, err = g.freeOld(ctx, imgs, now); err != nil {
		return err
	}
	capacity, available, err := g.images.ImageFsUsage(ctx)
	if err != nil {
		return err
	}
	available = min(available, capacity)
	if capacity == 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		g.events.Event(g.node, v1.EventTypeWarning, ReasonInvalidDiskCapacity, err.Error())
		return err
	}
	usage := 100 - int(available*100/capacity)
	if usage < g.policy.HighThresholdPercent {
		return nil
	}
	toFree := capacity*int64(100-g.policy.LowThresholdPercent)/100 - available
	log.WithFields(log.Fields{"usage": usage, "highThreshold": g.policy.HighThresholdPercent,
		"lowThreshold": g.policy.LowThresholdPercent, "amountToFree": toFree}).Info("image filesystem over the high threshold: freeing unused images")
	freed, err := g.freeSpace(ctx, toFree, imgs, now)
	if err != nil {
		return err
	}
	g.runPostGC(now)
	if freed < toFree {
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usage, formatSize(capacity), freed)
		g.events.Event(g.node, v1.EventTypeWarning, ReasonFreeDiskSpaceFailed, msg)
		return errors.New(msg)
	}
	return nil
}

// DeleteUnusedImages removes every image not in use or pinned and older
// than the minimum age, whatever the thresholds: the kubelet's reclaim of
// image space under disk pressure, before it evicts pods.
func (g *ImageGC) DeleteUnusedImages(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	imgs, err := g.evictionOrder(ctx, now)
	if err != nil {
		return err
	}
	if _, err = g.freeSpace(ctx, math.MaxInt64, imgs, now); err != nil {
		return err
	}
	g.runPostGC(now)
	return nil
}

// freeOld removes the images unused for longer than MaxAge, once hostlet
// has run that long (before, it cannot know they were unused).
func (g *ImageGC) freeOld(ctx context.Context, imgs []candidate, now time.Time) ([]candidate, error) {
	if g.policy.MaxAge == 0 || now.Sub(g.began) <= g.policy.MaxAge {
		return imgs, nil
	}
	var left []candidate
	var errs []error
	for _, img := range imgs {
		if now.Sub(img.lastUsed) > g.policy.MaxAge {
			if err := g.remove(ctx, img, "age"); err != nil {
				errs = append(errs, err)
				left = append(left, img)
			}
			continue
		}
		left = append(left, img)
	}
	if len(errs) > 0 {
		return left, fmt.Errorf("wanted to free images older than %v, encountered errors in image deletion: %w", g.policy.MaxAge, errors.Join(errs...))
	}
	return left, nil
}

// freeSpace removes images in order until toFree bytes are freed, skipping
// those used at this collection or known for less than MinAge.
func (g *ImageGC) freeSpace(ctx context.Context, toFree int64, imgs []candidate, now time.Time) (int64, error) {
	var freed int64
	var errs []error
	for _, img := range imgs {
		if !img.lastUsed.Before(now) || now.Sub(img.firstDetected) < g.policy.MinAge {
			continue
		}
		if err := g.remove(ctx, img, "space"); err != nil {
			errs = append(errs, err)
			continue
		}
		if freed += img.size; freed >= toFree {
			break
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w", toFree, freed, errors.Join(errs...))
	}
	return freed, nil
}

func (g *ImageGC) remove(ctx context.Context, img candidate, reason string) error {
	log.WithFields(log.Fields{"image": img.id, "size": img.size, "reason": reason}).Info("removing image")
	if err := g.images.RemoveImage(ctx, img.id); err != nil {
		return err
	}
	delete(g.records, img.id)
	g.collected.WithLabelValues(reason).Inc()
	return nil
}

// formatSize writes a size as the kubelet's message does.
func formatSize(b int64) string {
	const unit = 1024
	switch s := float64(b); {
	case b < unit:
		return fmt.Sprintf("%d B", b)
	case b < unit*unit:
		return fmt.Sprintf("%.1f KiB", s/unit)
	case b < unit*unit*unit:
		return fmt.Sprintf("%.1f MiB", s/(unit*unit))
	case b < unit*unit*unit*unit:
		return fmt.Sprintf("%.1f GiB", s/(unit*unit*unit))
	default:
		return fmt.Sprintf("%.1f TiB", s/(unit*unit*unit*unit))
	}
}

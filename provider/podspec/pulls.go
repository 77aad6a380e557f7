package podspec

import (
	"context"
	"errors"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// Puller is the kubelet's image puller: pulls one at a time
// (serializeImagePulls), or at most maxParallelImagePulls at once, each
// within the registry QPS (registryPullQPS, registryBurst). nil pulls at
// once, unthrottled.
type Puller struct {
	// turns holds one token per pull running; nil: no limit.
	turns chan struct{}
	// limiter is the kubelet's throttledImageService's; nil: no QPS.
	limiter flowcontrol.RateLimiter
}

// ErrPullQPSExceeded is the kubelet's error for a pull beyond the QPS: the
// pull fails (ErrImagePull, then the back-off) rather than waits.
var ErrPullQPSExceeded = errors.New("pull QPS exceeded")

// NewPuller is the kubelet's NewImageManager's puller: serialize pulls one
// at a time, else maxParallel (nil or < 1: no limit) at once; qps 0 does
// not throttle.
func NewPuller(serialize bool, maxParallel *int32, qps float32, burst int) *Puller {
	p := &Puller{}
	switch {
	case serialize:
		p.turns = make(chan struct{}, 1)
	case maxParallel != nil && *maxParallel >= 1:
		p.turns = make(chan struct{}, *maxParallel)
	}
	if qps != 0 {
		p.limiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	return p
}

// Pull runs pull when its turn comes, in the order the pulls came, and
// says how long it waited for it. As the kubelet's, the QPS is taken when
// the pull would start: one beyond it fails with ErrPullQPSExceeded. A
// pull whose ctx ends while it waits (its pod deleted) leaves the queue.
func (p *Puller) Pull(ctx context.Context, pull func() error) (waited time.Duration, err error) {
	if p == nil {
		return 0, pull()
	}
	if p.turns != nil {
		start := time.Now()
		select {
		case p.turns <- struct{}{}:
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		}
		defer func() { <-p.turns }()
		waited = time.Since(start)
	}
	if p.limiter != nil && !p.limiter.TryAccept() {
		return waited, ErrPullQPSExceeded
	}
	return waited, pull()
}

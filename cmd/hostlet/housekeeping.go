package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
	"unicode"

	"github.com/hostlet/hostlet/provider/gc"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/runtime"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// housekeeping are the settings of what keeps a long-running node's disk
// in bounds: container log rotation, image and dead-container GC, named
// and defaulted like the kubelet's.
type housekeeping struct {
	logMaxSize         string
	logMaxFiles        int
	logMaxWorkers      int
	logMonitorInterval time.Duration
	podLogsDir         string
	containerLogsDir   string

	imageGCHigh, imageGCLow    int
	imageMinAge, imageMaxAge   time.Duration
	maxDeadPerContainer        int
	maxDead                    int
	minContainerTTL            time.Duration
	imageGCPeriod, containerGC time.Duration
}

func (h *housekeeping) flags(fs *pflag.FlagSet) {
	fs.StringVar(&h.logMaxSize, "container-log-max-size", "10Mi", "size (a quantity) at which a container's log is rotated")
	fs.IntVar(&h.logMaxFiles, "container-log-max-files", 5, "most log files kept per container, the live one included (> 1)")
	fs.IntVar(&h.logMaxWorkers, "container-log-max-workers", 1, "logs rotated at the same time (>= 1)")
	fs.DurationVar(&h.logMonitorInterval, "container-log-monitor-interval", 10*time.Second, "how often container logs are checked for rotation (>= 3s)")
	fs.StringVar(&h.podLogsDir, "pod-logs-dir", runtime.DefaultPodLogsDir, "directory of the pods' container logs, <namespace>_<name>_<uid>/<container>/<restartCount>.log (the kubelet's podLogsDir, where log collectors look)")
	// The kubelet hardcodes it; tests move it.
	fs.StringVar(&h.containerLogsDir, "container-logs-dir", runtime.DefaultContainerLogsDir, "")
	_ = fs.MarkHidden("container-logs-dir")
	fs.IntVar(&h.imageGCHigh, "image-gc-high-threshold", 85, "image filesystem usage (percent) at which image GC runs; 100 turns it off unless --image-maximum-gc-age is set")
	fs.IntVar(&h.imageGCLow, "image-gc-low-threshold", 80, "image filesystem usage (percent) image GC frees space down to")
	fs.DurationVar(&h.imageMinAge, "image-minimum-gc-age", 2*time.Minute, "youngest an unused image can be to be garbage-collected")
	fs.DurationVar(&h.imageMaxAge, "image-maximum-gc-age", 0, "an image unused for longer is garbage-collected whatever the space; 0: never")
	fs.IntVar(&h.maxDeadPerContainer, "maximum-dead-containers-per-container", 1, "dead instances kept per container (the last terminated one is always kept); negative: no limit")
	fs.IntVar(&h.maxDead, "maximum-dead-containers", -1, "dead containers kept on the node (what pod status needs is always kept); negative: no limit")
	fs.DurationVar(&h.minContainerTTL, "minimum-container-ttl-duration", 0, "youngest a dead container can be to be garbage-collected")
	// The kubelet's fixed periods (5 min, 1 min); tests shorten them.
	fs.DurationVar(&h.imageGCPeriod, "image-gc-period", 5*time.Minute, "")
	_ = fs.MarkHidden("image-gc-period")
	fs.DurationVar(&h.containerGC, "container-gc-period", time.Minute, "")
	_ = fs.MarkHidden("container-gc-period")
}

// imageGC validates the image GC flags as the kubelet's configuration is.
func (h *housekeeping) imageGC() (gc.ImagePolicy, error) {
	p := gc.ImagePolicy{HighThresholdPercent: h.imageGCHigh, LowThresholdPercent: h.imageGCLow, MinAge: h.imageMinAge, MaxAge: h.imageMaxAge}
	return p, p.Validate()
}

func (h *housekeeping) containerGCPolicy() gc.ContainerPolicy {
	return gc.ContainerPolicy{MinAge: h.minContainerTTL, MaxPerPodContainer: h.maxDeadPerContainer, MaxContainers: h.maxDead}
}

// logRotation validates the log flags as the kubelet's configuration is.
func (h *housekeeping) logRotation() (runtime.LogRotation, error) {
	q, err := resource.ParseQuantity(h.logMaxSize)
	if err != nil {
		return runtime.LogRotation{}, fmt.Errorf("--container-log-max-size %q: %w", h.logMaxSize, err)
	}
	size, ok := q.AsInt64()
	if !ok {
		return runtime.LogRotation{}, fmt.Errorf("--container-log-max-size %q: invalid max log size", h.logMaxSize)
	}
	for _, d := range []string{h.podLogsDir, h.containerLogsDir} {
		if err := logDirValid(d); err != nil {
			return runtime.LogRotation{}, err
		}
	}
	switch {
	case h.logMaxFiles <= 1:
		return runtime.LogRotation{}, fmt.Errorf("--container-log-max-files must be greater than 1")
	case h.logMaxWorkers < 1:
		return runtime.LogRotation{}, fmt.Errorf("--container-log-max-workers must be greater than or equal to 1")
	case h.logMonitorInterval < 3*time.Second:
		return runtime.LogRotation{}, fmt.Errorf("--container-log-monitor-interval must be a positive time duration greater than or equal to 3s")
	}
	return runtime.LogRotation{MaxSize: size, MaxFiles: h.logMaxFiles, Workers: h.logMaxWorkers, Interval: h.logMonitorInterval}, nil
}

// logDirValid is the kubelet's check of podLogsDir: an absolute, clean,
// ASCII path.
func logDirValid(d string) error {
	switch {
	case !filepath.IsAbs(d):
		return fmt.Errorf("invalid configuration: pod logs path %q must be absolute path", d)
	case filepath.Clean(d) != d:
		return fmt.Errorf("invalid configuration: pod logs path %q must be normalized", d)
	}
	for _, c := range d {
		if c > unicode.MaxASCII {
			return fmt.Errorf("invalid configuration: pod logs path %q must contain ASCII characters only", d)
		}
	}
	return nil
}

// newGarbageCollectors are the image and dead-container GCs; the image GC
// prunes the pull records (nil with their gate off) of what it freed, as
// the kubelet's post-GC hook.
func newGarbageCollectors(ctx context.Context, o *options, policy gc.ImagePolicy, rt *runtime.Runtime, events record.EventRecorder,
	nodeRef *v1.ObjectReference, pulls *pullrecords.Manager) (*gc.ImageGC, *gc.ContainerGC) {
	imageGC := gc.NewImageGC(rt, policy, clock.RealClock{}, events, nodeRef)
	containerGC := gc.NewContainerGC(rt, o.containerGCPolicy(), clock.RealClock{}, events, nodeRef)
	if pulls != nil {
		imageGC.OnCollected(func(_ []string, began time.Time) { prunePullRecords(ctx, rt, pulls, began) })
	}
	return imageGC, containerGC
}

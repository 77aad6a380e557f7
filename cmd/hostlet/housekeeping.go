package main

import (
	"fmt"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// housekeeping are the settings of what keeps a long-running node's disk
// in bounds: container log rotation, image and dead-container GC, named
// and defaulted like the kubelet's.
type housekeeping struct {
	logMaxSize         string
	logMaxFiles        int
	logMaxWorkers      int
	logMonitorInterval time.Duration
}

func (h *housekeeping) flags(fs *pflag.FlagSet) {
	fs.StringVar(&h.logMaxSize, "container-log-max-size", "10Mi", "size (a quantity) at which a container's log is rotated")
	fs.IntVar(&h.logMaxFiles, "container-log-max-files", 5, "most log files kept per container, the live one included (> 1)")
	fs.IntVar(&h.logMaxWorkers, "container-log-max-workers", 1, "logs rotated at the same time (>= 1)")
	fs.DurationVar(&h.logMonitorInterval, "container-log-monitor-interval", 10*time.Second, "how often container logs are checked for rotation (>= 3s)")
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

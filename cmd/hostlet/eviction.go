package main

import (
	"context"
	"fmt"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"strconv"
	"strings"
	"time"

	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/diskusage"
	"github.com/hostlet/hostlet/provider/eviction"
	"github.com/hostlet/hostlet/provider/gc"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// evictionFlags are the kubelet's eviction settings beyond --eviction-hard
// (which the node's allocatable and admission read too).
type evictionFlags struct {
	evictionSoft      map[string]string
	evictionSoftGrace map[string]string
	evictionMaxGrace  int
	minimumReclaim    map[string]string
	pressurePeriod    time.Duration
	evictionInterval  time.Duration
	// volumeStatsPeriod is how often the pods' disk usage, which eviction
	// and /stats/summary read, is measured again.
	volumeStatsPeriod time.Duration
	// localStorageIsolation off: no ephemeral-storage capacity, no local
	// storage limits enforced.
	localStorageIsolation bool
}

func (e *evictionFlags) flags(fs *pflag.FlagSet) {
	fs.Var(&langleMap{m: &e.evictionSoft}, "eviction-soft", "soft eviction thresholds, e.g. memory.available<1.5Gi; each needs --eviction-soft-grace-period")
	fs.StringToStringVar(&e.evictionSoftGrace, "eviction-soft-grace-period", nil, "how long each soft threshold must be crossed before a pod is evicted, e.g. memory.available=1m30s")
	fs.IntVar(&e.evictionMaxGrace, "eviction-max-pod-grace-period", 0, "longest termination grace period (seconds) of a pod evicted for a soft threshold")
	fs.StringToStringVar(&e.minimumReclaim, "eviction-minimum-reclaim", nil, "how far above its threshold each signal must get back before pressure is relieved, e.g. imagefs.available=2Gi")
	fs.DurationVar(&e.pressurePeriod, "eviction-pressure-transition-period", 5*time.Minute, "how long a pressure condition stays True after its threshold was last crossed")
	// The kubelet's housekeeping period; tests shorten it.
	fs.DurationVar(&e.evictionInterval, "eviction-monitoring-interval", 10*time.Second, "")
	_ = fs.MarkHidden("eviction-monitoring-interval")
	fs.BoolVar(&e.localStorageIsolation, "local-storage-capacity-isolation", true, "account local ephemeral storage: the node's ephemeral-storage capacity, and pods evicted over their ephemeral-storage limits and emptyDir sizeLimits; false: neither, as the kubelet's (pods requesting ephemeral-storage then do not fit)")
	fs.DurationVar(&e.volumeStatsPeriod, "volume-stats-agg-period", diskusage.DefaultPeriod, "how often the disk usage of pods' volumes, logs and writable layers is measured (for stats and local storage eviction)")
}

// softThresholds parses --eviction-soft and its grace periods as the
// kubelet does: every soft threshold needs a grace period.
func (e *evictionFlags) softThresholds() (node.Thresholds, map[string]time.Duration, error) {
	soft, err := node.ParseThresholds(e.evictionSoft)
	if err != nil {
		return nil, nil, fmt.Errorf("--eviction-soft: %w", err)
	}
	grace := map[string]time.Duration{}
	for signal, v := range e.evictionSoftGrace {
		if _, err := node.ParseThresholds(map[string]string{signal: "1"}); err != nil {
			return nil, nil, fmt.Errorf("--eviction-soft-grace-period: %w", err)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, nil, fmt.Errorf("--eviction-soft-grace-period: %w", err)
		}
		if d < 0 {
			return nil, nil, fmt.Errorf("--eviction-soft-grace-period: invalid eviction grace period specified: %v, must be a positive value", v)
		}
		grace[signal] = d
	}
	for signal := range soft {
		if _, ok := grace[signal]; !ok {
			return nil, nil, fmt.Errorf("grace period must be specified for the soft eviction threshold %v", signal)
		}
	}
	return soft, grace, nil
}

// minimumReclaims parses --eviction-minimum-reclaim as the kubelet's
// parseMinimumReclaims: a known signal, a positive percentage or a
// non-negative quantity.
func (e *evictionFlags) minimumReclaims() (node.Thresholds, error) {
	out := node.Thresholds{}
	for signal, v := range e.minimumReclaim {
		if _, err := node.ParseThresholds(map[string]string{signal: "1"}); err != nil {
			return nil, fmt.Errorf("--eviction-minimum-reclaim: %w", err)
		}
		if pct, ok := strings.CutSuffix(v, "%"); ok {
			f, err := strconv.ParseFloat(pct, 32)
			if err != nil {
				return nil, fmt.Errorf("--eviction-minimum-reclaim: %w", err)
			}
			if f <= 0 {
				return nil, fmt.Errorf("eviction percentage minimum reclaim %v must be positive: %s", signal, v)
			}
			out[signal] = node.Threshold{Signal: signal, Percentage: f / 100}
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("--eviction-minimum-reclaim: %w", err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("negative eviction minimum reclaim specified for %v", signal)
		}
		out[signal] = node.Threshold{Signal: signal, Quantity: &q}
	}
	return out, nil
}

// evictionConfig is the eviction manager's configuration from the flags;
// the node's hard thresholds are parsed with the node's configuration.
func (o *options) evictionConfig(nodeCfg node.Config) (eviction.Config, error) {
	soft, grace, err := o.softThresholds()
	if err != nil {
		return eviction.Config{}, err
	}
	if o.evictionMaxGrace < 0 {
		return eviction.Config{}, fmt.Errorf("--eviction-max-pod-grace-period must not be negative")
	}
	minReclaim, err := o.minimumReclaims()
	if err != nil {
		return eviction.Config{}, err
	}
	return eviction.Config{
		Hard: nodeCfg.EvictionHard, Soft: soft, SoftGrace: grace,
		MaxPodGrace: time.Duration(o.evictionMaxGrace) * time.Second, MinReclaim: minReclaim,
		PressureTransitionPeriod: o.pressurePeriod, NoLocalStorageLimits: !o.localStorageIsolation,
	}, nil
}

// evictionStats is what the eviction manager measures pods with: the
// runtime's samples and log dirs, the pods' volume directories, and the
// disk usage cache the stats summary reads too.
type evictionStats struct {
	*runtime.Runtime
	volumemanager.Dirs
	usage *diskusage.Cache
}

// RootfsUsage is the cache's figure, not the runtime's fresh measurement.
func (e evictionStats) RootfsUsage(ctx context.Context, id string) (runtime.DiskUsage, error) {
	return e.usage.RootfsUsage(ctx, id)
}

func (e evictionStats) DirUsage(dir string) (runtime.DiskUsage, error) { return e.usage.DirUsage(dir) }

// newEvictions is the eviction manager: it observes the node's signals,
// measures pods with the runtime and the disk usage cache, ends pods
// through the provider and reclaims disk through the GCs first.
func newEvictions(cfg eviction.Config, nd *node.Node, prov *provider.Provider, rt *runtime.Runtime, dirs volumemanager.Dirs, usage *diskusage.Cache,
	imageGC *gc.ImageGC, containerGC *gc.ContainerGC, events record.EventRecorder) *eviction.Manager {
	return eviction.New(cfg, nd, prov, evictionStats{rt, dirs, usage}, containerGC.GarbageCollect, imageGC.DeleteUnusedImages,
		events, nd.Ref(), clock.RealClock{})
}

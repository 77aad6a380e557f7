package main

import (
	"fmt"
	"time"

	"github.com/hostlet/hostlet/provider/eviction"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/spf13/pflag"
)

// evictionFlags are the kubelet's eviction settings beyond --eviction-hard
// (which the node's allocatable and admission read too).
type evictionFlags struct {
	evictionSoft      map[string]string
	evictionSoftGrace map[string]string
	evictionMaxGrace  int
	pressurePeriod    time.Duration
	evictionInterval  time.Duration
}

func (e *evictionFlags) flags(fs *pflag.FlagSet) {
	fs.Var(&langleMap{m: &e.evictionSoft}, "eviction-soft", "soft eviction thresholds, e.g. memory.available<1.5Gi; each needs --eviction-soft-grace-period")
	fs.StringToStringVar(&e.evictionSoftGrace, "eviction-soft-grace-period", nil, "how long each soft threshold must be crossed before a pod is evicted, e.g. memory.available=1m30s")
	fs.IntVar(&e.evictionMaxGrace, "eviction-max-pod-grace-period", 0, "longest termination grace period (seconds) of a pod evicted for a soft threshold")
	fs.DurationVar(&e.pressurePeriod, "eviction-pressure-transition-period", 5*time.Minute, "how long a pressure condition stays True after its threshold was last crossed")
	// The kubelet's housekeeping period; tests shorten it.
	fs.DurationVar(&e.evictionInterval, "eviction-monitoring-interval", 10*time.Second, "")
	_ = fs.MarkHidden("eviction-monitoring-interval")
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
	return eviction.Config{
		Hard: nodeCfg.EvictionHard, Soft: soft, SoftGrace: grace,
		MaxPodGrace: time.Duration(o.evictionMaxGrace) * time.Second,
	}, nil
}

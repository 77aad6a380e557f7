package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/node"
)

// Soft thresholds are parsed like hard ones and each needs a grace period,
// as the kubelet requires.
func TestEvictionSoftFlags(t *testing.T) {
	var o options
	if err := o.parse([]string{"--eviction-soft", "memory.available<1Gi", "--eviction-soft-grace-period", "memory.available=1m30s",
		"--eviction-max-pod-grace-period", "30", "--eviction-pressure-transition-period", "10s"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.evictionConfig(node.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Soft[node.SignalMemoryAvailable]; !ok || cfg.SoftGrace[node.SignalMemoryAvailable] != 90*time.Second ||
		cfg.MaxPodGrace != 30*time.Second || o.pressurePeriod != 10*time.Second {
		t.Errorf("config %+v, transition period %v", cfg, o.pressurePeriod)
	}
	for _, args := range [][]string{
		{"--eviction-soft", "memory.available<1Gi"},
		{"--eviction-soft", "memory.available<1Gi", "--eviction-soft-grace-period", "memory.available=-1s"},
		{"--eviction-soft-grace-period", "memory.free=1s"},
		{"--eviction-soft", "memory.available<1Gi", "--eviction-soft-grace-period", "memory.available=1s", "--eviction-max-pod-grace-period", "-1"},
	} {
		o = options{}
		if err := o.parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := o.evictionConfig(node.Config{}); err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}
}

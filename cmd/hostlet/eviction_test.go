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

// --eviction-minimum-reclaim takes quantities and percentages per signal,
// as the kubelet's.
func TestEvictionMinimumReclaimFlag(t *testing.T) {
	var o options
	if err := o.parse([]string{"--eviction-minimum-reclaim", "nodefs.available=500Mi,imagefs.available=2%,memory.available=0"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.evictionConfig(node.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.MinReclaim
	if r[node.SignalNodeFsAvailable].Value(0) != 500<<20 || r[node.SignalImageFsAvailable].Value(1000) != 20 ||
		r[node.SignalMemoryAvailable].Value(1000) != 0 {
		t.Errorf("minimum reclaim %+v", r)
	}
	for _, v := range []string{"memory.free=1Gi", "nodefs.available=-1", "nodefs.available=0%", "nodefs.available=x"} {
		o = options{}
		if err := o.parse([]string{"--eviction-minimum-reclaim", v}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.evictionConfig(node.Config{}); err == nil {
			t.Errorf("%s: accepted", v)
		}
	}
}

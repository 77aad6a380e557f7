package node

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseThresholds(t *testing.T) {
	ts, err := ParseThresholds(map[string]string{
		"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "0%", "pid.available": "100%",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ts[SignalMemoryAvailable].Value(1 << 30); got != 100<<20 {
		t.Errorf("memory threshold %d", got)
	}
	if got := ts[SignalNodeFsAvailable].Value(1000); got != 100 {
		t.Errorf("nodefs threshold %d", got)
	}
	if _, on := ts[SignalImageFsAvailable]; on {
		t.Error("0% must switch the signal off")
	}
	if _, on := ts[SignalPIDAvailable]; on {
		t.Error("100% must switch the signal off")
	}
	for in, want := range map[string]string{
		"bogus.available":  "unsupported eviction signal bogus.available",
		"memory.available": "must be positive",
	} {
		val := "1Gi"
		if in == "memory.available" {
			val = "-1Mi"
		}
		if _, err := ParseThresholds(map[string]string{in: val}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: error %v, want %q", in, val, err, want)
		}
	}
	if _, err := ParseThresholds(map[string]string{"nodefs.available": "120%"}); err == nil {
		t.Error("120% accepted")
	}
}

func TestAllocatableSubtractsReservedAndThresholds(t *testing.T) {
	ts, _ := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"})
	n := &Node{cfg: Config{EvictionHard: ts, Reserved: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("1Gi"),
	}}}
	got := n.allocatableFrom(v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("2"),
		v1.ResourceMemory:           resource.MustParse("4Gi"),
		v1.ResourceEphemeralStorage: resource.MustParse("1000"),
	})
	if got.Cpu().MilliValue() != 1500 || got.Memory().Value() != 3<<30-100<<20 || got.StorageEphemeral().Value() != 900 {
		t.Errorf("allocatable %v", got)
	}
}

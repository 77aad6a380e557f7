package node

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The host's own readings: whatever the machine, they are non-zero and
// consistent with each other.
func TestHostReadings(t *testing.T) {
	cpu, boot, err := hostCPU()
	if err != nil || cpu == 0 || boot.IsZero() {
		t.Fatalf("cpu %d boot %v err %v", cpu, boot, err)
	}
	mem, err := hostMemory()
	if err != nil {
		t.Fatal(err)
	}
	if *mem.UsageBytes == 0 || *mem.WorkingSetBytes == 0 || *mem.WorkingSetBytes > *mem.UsageBytes || *mem.AvailableBytes == 0 {
		t.Errorf("memory usage %d working set %d available %d", *mem.UsageBytes, *mem.WorkingSetBytes, *mem.AvailableBytes)
	}
	fs := FsStats(t.TempDir(), metav1.Now())
	if fs == nil || *fs.CapacityBytes == 0 || *fs.UsedBytes > *fs.CapacityBytes {
		t.Errorf("fs %+v", fs)
	}
}

package node

import (
	"context"
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

type imageFsRuntime struct {
	Runtime
	dir string
}

func (r imageFsRuntime) ImageFsDir(context.Context) (string, error) { return r.dir, nil }

// The container filesystem is the image filesystem, as the kubelet's CRI
// stats provider reports it when they are not split.
func TestStatsContainerFs(t *testing.T) {
	dir := t.TempDir()
	n := &Node{cfg: Config{Name: "n", RootDir: dir}, rt: imageFsRuntime{dir: dir}}
	s, err := n.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime == nil || s.Runtime.ImageFs == nil || s.Runtime.ContainerFs == nil {
		t.Fatalf("runtime %+v", s.Runtime)
	}
	if *s.Runtime.ContainerFs.CapacityBytes != *s.Runtime.ImageFs.CapacityBytes || *s.Runtime.ContainerFs.Inodes != *s.Runtime.ImageFs.Inodes ||
		s.Runtime.ContainerFs == s.Runtime.ImageFs {
		t.Errorf("containerFs %+v, imageFs %+v", s.Runtime.ContainerFs, s.Runtime.ImageFs)
	}
}

package server

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestVolumeFsStats(t *testing.T) {
	dir := t.TempDir()
	fs := volumeFsStats(dir, metav1.Now())
	if fs == nil || fs.CapacityBytes == nil || *fs.CapacityBytes == 0 || fs.InodesUsed == nil {
		t.Fatalf("stats of %s: %+v", dir, fs)
	}
	// A directory whose statfs has not returned is not asked again.
	statFSInFlight.Store(dir, true)
	defer statFSInFlight.Delete(dir)
	if fs := volumeFsStats(dir, metav1.Now()); fs != nil {
		t.Errorf("a stuck directory asked again: %+v", fs)
	}
	if fs := volumeFsStats(dir+"/missing", metav1.Now()); fs != nil {
		t.Errorf("stats of a missing directory: %+v", fs)
	}
}

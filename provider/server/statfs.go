package server

import (
	"sync"
	"time"

	"github.com/hostlet/hostlet/provider/node"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// statFSTimeout bounds a volume's statfs in a summary: a hard NFS mount
// of a server gone blocks statfs for as long as the server is, which must
// not hold up the node's summary (the kubelet computes these in the
// background for the same reason).
const statFSTimeout = 2 * time.Second

// statFSInFlight are the directories whose statfs has not returned: one
// stuck call per directory at most, never one per request.
var statFSInFlight sync.Map

// volumeFsStats is the filesystem of a remote or device volume (NFS,
// iSCSI, local PVs) as the kubelet's MetricsStatFS: nil when statfs fails,
// is still stuck from before, or takes longer than statFSTimeout.
func volumeFsStats(dir string, now metav1.Time) *statsv1alpha1.FsStats {
	if _, busy := statFSInFlight.LoadOrStore(dir, true); busy {
		return nil
	}
	done := make(chan *statsv1alpha1.FsStats, 1)
	go func() {
		defer statFSInFlight.Delete(dir)
		done <- node.FsStats(dir, now)
	}()
	select {
	case fs := <-done:
		return fs
	case <-time.After(statFSTimeout):
		return nil
	}
}

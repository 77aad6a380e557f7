package main

import (
	"github.com/hostlet/hostlet/provider/health"
	"k8s.io/utils/clock"
)

// liveness is the node's liveness (/healthz, the watchdog), in the
// kubelet's terms: pod events handed to the workers (its sync loop),
// containerd's event stream (its PLEG), containerd answering (its runtime
// check).
type liveness struct {
	checks   *health.Checks
	syncLoop *health.Progress
	pleg     *health.Stream
	runtime  *health.Heartbeat
}

func newLiveness() liveness {
	checks := health.New(clock.RealClock{})
	return liveness{
		checks:   checks,
		syncLoop: checks.Progress("syncloop", "pod sync", health.SyncLoopThreshold),
		pleg:     checks.Stream("pleg", "containerd's event stream", health.PLEGThreshold),
		runtime:  checks.Heartbeat("runtime", "containerd", health.RuntimeThreshold),
	}
}

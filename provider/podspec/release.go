package podspec

import (
	"context"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// ReleasePod frees what a pod that ended (Succeeded or Failed, its
// containers stopped, its final status known) holds on the host, as the
// kubelet does once it is terminal (SyncTerminatingPod, then
// SyncTerminatedPod): its ResourceClaims are unprepared, its volumes are no
// longer refreshed and are unmounted and removed (emptyDir contents,
// configMap, secret, projected and downward API files, service-account
// tokens, subPath binds, local PVs' binds, image volumes' mounts and
// snapshots; a ReadWriteOncePod volume is free for another pod then), its
// sandbox and its cgroup go and its user namespace IDs are freed. Its
// containers stay, for `kubectl logs` and its status, and so does the rest
// of its directory (their termination messages): Cleanup removes them once
// the pod is deleted. Calling it again does nothing more.
func (r *Runtime) ReleasePod(ctx context.Context, pod *v1.Pod) {
	uid := string(pod.UID)
	l := lifecycle.PodLogger(pod)
	// Also called by the sweep: a panic costs this release, not the node.
	defer crash.Recover(l, nil)
	r.tokens.release(pod.UID)
	if r.cfg.Claims != nil {
		r.cfg.Claims.Unprepare(ctx, pod.UID)
	}
	// A terminal pod found by a restarted hostlet may still have a
	// container running: it is stopped, not removed.
	sts, err := r.rt.ListContainers(ctx, uid)
	if err != nil {
		l.WithError(err).Warn("listing containers of a terminal pod")
	}
	for _, st := range sts {
		if st.State == runtime.StateRunning {
			_ = r.rt.StopContainer(ctx, st.ID, unix.SIGKILL, 0)
		}
	}
	if err := r.rt.RemoveSandbox(ctx, uid); err != nil {
		l.WithError(err).Warn("removing sandbox")
	}
	// Image volumes and CSI volumes before the volumes' directory: their
	// snapshots and publications are released while the pod's directory
	// still tells the sweep to retry.
	if err := r.rt.ReleaseImageVolumes(ctx, uid); err != nil {
		l.WithError(err).Warn("releasing image volumes")
	}
	if torn, err := r.volumes.ReleasePod(ctx, pod.UID); err != nil {
		l.WithError(err).Warn("pod volumes not torn down")
	} else if torn {
		l.Info("pod volumes torn down")
	}
	_, had, _ := r.rt.PodCgroupState(uid, string(node.QOSClass(pod)))
	if err := r.rt.RemovePodCgroup(uid); err != nil {
		l.WithError(err).Warn("removing the pod's cgroup")
	} else if had {
		l.Info("pod cgroup removed")
	}
	r.updateQOSCgroups()
	r.userns.Release(pod.UID)
}

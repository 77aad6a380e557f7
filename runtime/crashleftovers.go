package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/netns"
	"github.com/containerd/errdefs"
	log "github.com/sirupsen/logrus"
)

// RemoveCrashLeftovers removes what a hostlet killed in the middle of making
// a pod left behind where no record of it leads anything back: called once
// at start, before any pod is synced, when nothing of this process can be in
// the making yet.
//
//   - A container created (or its task created) but never started: adopted,
//     it would count as an instance that ran, so the pod's container would
//     be started again as a restart (restartCount 1) beside it, and it would
//     stay in containerd until the pod's deletion. Removed, the worker makes
//     the container again with the same attempt, as if the first try had
//     never been.
//   - A container's rootfs snapshot prepared, the container never
//     recorded: held by the creation's lease (creationLease), which is
//     ended, so containerd's garbage collector removes the snapshot.
//   - A shim serving nothing, started for a container that is gone
//     (containerd killed too): asked to exit (endIdleShims).
//   - A network namespace under <root-dir>/netns that no sandbox record
//     names: the sandbox's record is saved only once its namespace is made
//     (and for a pod in a user namespace, once all its namespaces are), so
//     a kill in between leaves one pinned forever. A record names every
//     namespace the CNI ADD may have used (it is saved before the ADD), so
//     one no record names never had an address.
//
// Only this hostlet's containers are touched: those logging under its pod
// logs dir, as the sweep tells them (nodes sharing a containerd namespace
// on one host, as in the e2e tests).
func (r *Runtime) RemoveCrashLeftovers(ctx context.Context) error {
	errNetns := errors.Join(r.removeUnrecordedNetNS(), r.endCreationLeases(ctx))
	cs, err := r.ListContainers(ctx, "")
	if err != nil {
		return errors.Join(errNetns, err)
	}
	// All at once: the gate orders the task deletions, and the node waits
	// for them before its first pod.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = []error{errNetns}
	)
	for _, st := range cs {
		if st.State != StateCreated || !r.ownsLog(st.LogPath) {
			continue
		}
		log.WithFields(log.Fields{"container": st.ID, "podUID": st.PodUID, "name": st.Name}).
			Info("removing a container created but never started before a restart of hostlet")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.RemoveContainer(ctx, st.ID); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Last: the removals above may have been what a shim served.
	errs = append(errs, r.endIdleShims(ctx))
	return errors.Join(errs...)
}

// ownsLog says whether a container's log path is under this hostlet's pod
// logs dir (or the root dir's, where hostlets before --pod-logs-dir wrote).
func (r *Runtime) ownsLog(path string) bool {
	for _, d := range []string{r.podLogsDir, filepath.Join(r.rootDir, "logs")} {
		if path != "" && strings.HasPrefix(path, filepath.Clean(d)+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// removeUnrecordedNetNS unpins and removes the network namespaces under
// <root-dir>/netns that no pod's sandbox record names, whole or not.
func (r *Runtime) removeUnrecordedNetNS() error {
	dir := filepath.Join(r.rootDir, "netns")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return nil
	}
	recorded := r.recordedNetNS()
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if recorded[p] {
			continue
		}
		log.WithField("netns", p).Info("removing a network namespace no pod's sandbox records (left by a restart of hostlet)")
		if !isMountPoint(p) {
			// Killed between the file's creation and its bind mount: a
			// file only, which containerd's Remove fails to unmount.
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if err := netns.LoadNetNS(p).Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recordedNetNS are the network namespaces the pods' sandbox records name,
// whole or not (an incomplete record's too: its teardown will run the CNI
// DEL in it).
func (r *Runtime) recordedNetNS() map[string]bool {
	out := map[string]bool{}
	recs, _ := r.SandboxRecords()
	for _, s := range recs {
		if s.NetNSPath != "" {
			out[filepath.Clean(s.NetNSPath)] = true
		}
	}
	return out
}

// endCreationLeases ends the leases of container creations this hostlet
// (its root dir) began and a kill cut short, synchronously, so that the
// collection they trigger has removed what they alone held (a prepared
// rootfs snapshot) before the first pod is synced.
func (r *Runtime) endCreationLeases(ctx context.Context) error {
	ls := r.client.LeasesService()
	all, err := ls.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range all {
		if !strings.HasPrefix(l.ID, creationLeasePrefix) || l.Labels[labelLeaseOwner] != r.rootDir {
			continue
		}
		log.WithField("lease", l.ID).Info("ending the lease of a container creation a restart of hostlet interrupted")
		if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

package runtime

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hostlet/hostlet/stargz"
	log "github.com/sirupsen/logrus"
	"k8s.io/utils/clock"
)

// A restarted stargz snapshotter knows no credentials (it keeps them in
// memory only), yet remounts its snapshots from their registries and
// fetches their files later. So hostlet keeps, in memory only (never on
// disk), the credentials each lazy pull handed over, by image reference,
// and when the snapshotter's credentials socket is made anew hands over
// again those of the images the node's containers and image volumes use,
// then says it is done (the snapshotter waits for that before it
// remounts). The others are forgotten then: nothing needs them. A lazily
// pulled image's volumes are views in the very snapshotter that is
// starting, which lists nothing until it serves (after the handover), so
// they are found by their leases in containerd's metadata
// (imagevolume.go).

// heldCredentials are the lazy pulls' credentials by image reference.
type heldCredentials struct {
	mu sync.Mutex
	m  map[string]heldEntry
}

type heldEntry struct{ user, secret string }

// set records a pull's credentials; an anonymous pull's (none) replace
// older ones and say the image is known.
func (h *heldCredentials) set(ref, user, secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldEntry{}
	}
	h.m[ref] = heldEntry{user, secret}
}

// known says whether ref's credentials (or their absence) are held.
func (h *heldCredentials) known(ref string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[ref]
	return ok
}

// inUse returns the credentials of the references in use and forgets the
// others.
func (h *heldCredentials) inUse(used map[string]bool) map[string]heldEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]heldEntry{}
	for ref, e := range h.m {
		if used[ref] {
			if e != (heldEntry{}) {
				out[ref] = e
			}
		} else {
			delete(h.m, ref)
		}
	}
	return out
}

// WatchSnapshotter hands the stargz snapshotter (--image-snapshotter) the
// credentials of the images in use each time its credentials socket is
// made anew, until ctx ends; nothing without a snapshotter. A watch that
// cannot be set up (the host's inotify instances used up) is retried with
// back-off rather than given up: until then a restarted snapshotter waits
// in vain.
func (r *Runtime) WatchSnapshotter(ctx context.Context) error {
	if r.snapshotter == "" {
		return nil
	}
	return retryWatch(ctx, clock.RealClock{}, func() error {
		return watchSocket(ctx, r.snapshotterCreds, nil, func() { r.rehandCredentials(ctx, r.imagesInUse) })
	})
}

// retryWatch runs watch again after each failure, 1 s doubling up to a
// minute apart, until ctx ends.
func retryWatch(ctx context.Context, clk clock.Clock, watch func() error) error {
	delay := time.Second
	for {
		err := watch()
		if ctx.Err() != nil {
			return nil
		}
		log.WithError(err).WithField("retry in", delay).Warn("lazy pull: the stargz snapshotter's credentials socket is not watched")
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(delay):
		}
		delay = min(2*delay, time.Minute)
	}
}

// HoldLazyCredentials is for an image a pod uses without pulling it (present
// already, a container adopted after a restart of hostlet): hostlet holds
// in memory only the credentials of its own lazy pulls, so after its
// restart it knows none, and a snapshotter restarted later would get
// nothing for the images its running pods were lazily pulled with. So
// the first time a pod uses such an image (unpacked in the snapshotter)
// in this run of hostlet, the pod's credentials for its registry are
// handed to the snapshotter (it may have restarted while hostlet was down
// and given up waiting for them) and held. An image in overlayfs, or one
// known already, costs a map lookup; creds is called only when needed.
func (r *Runtime) HoldLazyCredentials(ctx context.Context, ref string, creds Credentials) {
	if r.snapshotter == "" {
		return
	}
	name, err := NormalizeImage(ref)
	if err != nil || r.held.known(name) {
		return
	}
	img, err := r.client.GetImage(ctx, name)
	if err != nil {
		return
	}
	if ok, err := img.IsUnpacked(ctx, r.snapshotter); err != nil || !ok {
		// Not lazily pulled: nothing of it is fetched later.
		if err == nil {
			r.held.set(name, "", "")
		}
		return
	}
	user, secret := snapshotterCredentials(name, creds)
	if user != "" || secret != "" {
		if err := stargz.SendCredentials(ctx, r.snapshotterCreds, name, user, secret); err != nil {
			// Held all the same: the snapshotter's restart hands them.
			log.WithError(err).WithField("image", name).Warn("lazy pull: handing a pod's credentials to the stargz snapshotter")
		}
	}
	r.held.set(name, user, secret)
}

// imagesInUse are the images of the namespace's containers (running or
// not) and image volumes; neither list asks a snapshotter.
func (r *Runtime) imagesInUse(ctx context.Context) (map[string]bool, error) {
	cs, err := r.client.ContainerService().List(ctx)
	if err != nil {
		return nil, err
	}
	used, err := r.imageVolumeLeaseImages(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		used[c.Image] = true
	}
	return used, nil
}

// rehandCredentials sends the held credentials of the images in use, then
// the end of them. A failure is logged: the snapshotter stops waiting on
// its own, and the images' next pulls hand their credentials over again.
func (r *Runtime) rehandCredentials(ctx context.Context, inUse func(context.Context) (map[string]bool, error)) {
	used, err := inUse(ctx)
	if err != nil {
		log.WithError(err).Warn("lazy pull: the images in use, for the restarted stargz snapshotter")
		return
	}
	held := r.held.inUse(used)
	for ref, e := range held {
		if err := stargz.SendCredentials(ctx, r.snapshotterCreds, ref, e.user, e.secret); err != nil {
			log.WithError(err).WithField("image", ref).Warn("lazy pull: handing credentials to the restarted stargz snapshotter")
			return
		}
	}
	if err := stargz.SendSynced(ctx, r.snapshotterCreds); err != nil {
		log.WithError(err).Warn("lazy pull: telling the restarted stargz snapshotter the credentials are in")
		return
	}
	log.WithField("images", len(held)).Info("lazy pull: credentials handed to the restarted stargz snapshotter")
}

// watchSocket calls made each time socket is made anew (created, then
// given its mode: the listener is up by then), until ctx ends. ready, if
// set, is closed once the watch is in place.
func watchSocket(ctx context.Context, socket string, ready chan<- struct{}, made func()) error {
	dir := filepath.Dir(socket)
	// The snapshotter may start after hostlet; its directory is root's.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return err
	}
	if ready != nil {
		close(ready)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			// Create comes before the listener is up, Chmod after:
			// both are handled (the handover is idempotent), so a
			// snapshotter that sets no mode is caught too.
			if ev.Name == socket && ev.Has(fsnotify.Create|fsnotify.Chmod) {
				made()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.WithError(err).Warn("lazy pull: watching the stargz snapshotter's socket")
		}
	}
}

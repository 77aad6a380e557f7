package runtime

import (
	"context"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/stargz-snapshotter/fs/source"
	"github.com/distribution/reference"
	"github.com/hostlet/hostlet/stargz"
	log "github.com/sirupsen/logrus"
)

// Lazy pulls (--image-snapshotter=stargz): images are pulled into
// containerd's proxy snapshotter "stargz" (`hostlet stargz-snapshotter`)
// with the labels its docs name for a containerd client's pull
// (source.AppendDefaultLabelsHandlerWrapper): for an eStargz layer it
// mounts the layer from the registry and containerd's unpacker skips
// fetching the blob; any other layer it refuses to mount remotely and
// containerd fetches and unpacks it into the same snapshotter as overlayfs
// would (the fallback, per layer, without a second pull). The
// snapshotter fetches files later, on demand, so it is handed the pull's
// credentials first. Containers are then made in whichever snapshotter
// holds their image unpacked (imageSnapshotter): images imported or pulled
// before the flag stay in overlayfs.

// lazyPullOpts are the extra options of a pull of name (normalized) through
// the configured snapshotter, none without one. With the snapshotter's
// credentials socket not answering, the image is pulled as without it.
func (r *Runtime) lazyPullOpts(ctx context.Context, name string, creds Credentials) []containerd.RemoteOpt {
	if r.snapshotter == "" {
		return nil
	}
	user, secret := snapshotterCredentials(name, creds)
	if err := stargz.SendCredentials(ctx, r.snapshotterCreds, name, user, secret); err != nil {
		log.WithError(err).WithField("image", name).Warn("lazy pull: the stargz snapshotter does not answer; pulling the whole image into overlayfs")
		return nil
	}
	// Kept for a restarted snapshotter (lazycreds.go).
	r.held.set(name, user, secret)
	// No prefetch size: an eStargz image's prefetch landmark says what to
	// fetch at mount.
	return []containerd.RemoteOpt{
		containerd.WithPullSnapshotter(r.snapshotter),
		containerd.WithImageHandlerWrapper(source.AppendDefaultLabelsHandlerWrapper(name, 0)),
	}
}

// snapshotterCredentials are creds for the registry of name (normalized),
// none without creds; a failure is logged and the pull goes anonymous.
func snapshotterCredentials(name string, creds Credentials) (user, secret string) {
	if creds == nil {
		return "", ""
	}
	named, err := reference.ParseNormalizedNamed(name)
	if err == nil {
		user, secret, err = creds(reference.Domain(named))
	}
	if err != nil {
		log.WithError(err).WithField("image", name).Warn("lazy pull: no credentials for the snapshotter")
	}
	return user, secret
}

// imageSnapshotter is the snapshotter a container of img is made in: the
// configured one when img is unpacked there, else containerd's default,
// where img is unpacked if it is not yet.
func (r *Runtime) imageSnapshotter(ctx context.Context, img containerd.Image) (string, error) {
	if r.snapshotter != "" {
		ok, err := img.IsUnpacked(ctx, r.snapshotter)
		if err != nil && !errdefs.IsNotFound(err) {
			return "", err
		}
		if ok {
			return r.snapshotter, nil
		}
	}
	return "", r.ensureUnpacked(ctx, img)
}

// snapshotters are those hostlet's images and image volumes may be in:
// containerd's default ("") and the configured one.
func (r *Runtime) snapshotters() []string {
	if r.snapshotter == "" {
		return []string{""}
	}
	return []string{"", r.snapshotter}
}

// snapshotterDown says whether err is the configured snapshotter (name)
// not answering, logged: what hostlet does there (release image volumes,
// list those in use) is skipped rather than failing every pod's teardown
// while the snapshotter process is down.
func (r *Runtime) snapshotterDown(name string, err error) bool {
	if name == "" || !errdefs.IsUnavailable(err) {
		return false
	}
	log.WithError(err).WithField("snapshotter", name).Warn("snapshotter not answering; its image volumes skipped")
	return true
}

package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/image-spec/identity"
	"golang.org/x/sys/unix"
)

// Labels of an image volume's snapshot. The owner and target let a
// restarted hostlet find and release what a pod left; the image marks it
// in use for image garbage collection, as the kubelet counts image volumes;
// gc.root keeps containerd's own GC from collecting a view no container
// references.
const (
	labelImageVolumeOwner  = "hostlet.io/image-volume.owner"
	labelImageVolumeTarget = "hostlet.io/image-volume.target"
	labelImageVolumeImage  = "hostlet.io/image-volume.image"
	labelGCRoot            = "containerd.io/gc.root"
	imageVolumeKeyPrefix   = "hostlet-image-volume/"
)

// ImageVolume is an image's root filesystem mounted read-only on the host,
// for containers to bind, as containerd's CRI mounts an image volume.
type ImageVolume struct {
	// Owner groups the volumes released together (the pod's UID).
	Owner string
	// Name is the volume's name, unique within its owner.
	Name  string
	Image *Image
	// Target is the host directory the image is mounted at.
	Target string
	// IDMap, for a pod with a user namespace, mounts the image's layers
	// idmapped to the pod's IDs, as CRI does: the overlay itself cannot
	// be idmapped again when it is bound into the container (the bind is
	// then runtime.Mount.IDMapped).
	IDMap *IDMap
}

// Digest is the hex of the image's manifest digest (empty for an image not
// read from containerd).
func (i *Image) Digest() string {
	if i.image == nil {
		return ""
	}
	return i.image.Target().Digest.Encoded()
}

// imageVolumeKey is the snapshot key of a volume: the same for the same
// owner, name and image, so a restarted hostlet mounts the snapshot it made
// before instead of making another. The image's digest is part of it: a
// pull that moved the name gives containers started later the new image,
// as CRI keys its image mounts by image ID.
func imageVolumeKey(owner, name, digest string) string {
	return imageVolumeKeyPrefix + owner + "/" + name + "/" + digest
}

// imageVolumeMu serialises mounting and releasing image volumes: two
// containers of a pod mounting the same volume at once must not both mount
// it (CRI relies on the kubelet creating a pod's containers one by one).
var imageVolumeMu sync.Mutex

// MountImageVolume mounts the image's root filesystem read-only at
// v.Target through a containerd snapshot view of its layers (made once,
// then reused), unless it is mounted there already. A view, where CRI
// prepares an active snapshot that it binds read-only: the overlay itself
// has no upper directory, so nothing can be written to it on the host
// either.
func (r *Runtime) MountImageVolume(ctx context.Context, v ImageVolume) error {
	imageVolumeMu.Lock()
	defer imageVolumeMu.Unlock()
	key := imageVolumeKey(v.Owner, v.Name, v.Image.Digest())
	// Recorded first: a volume a hostlet without records mounted gets one
	// when a container uses it again.
	if err := r.recordImageVolume(ctx, key, v); err != nil {
		return fmt.Errorf("failed to record image volume %q: %w", v.Image.Ref, err)
	}
	if mounted, err := mountinfo.Mounted(v.Target); err == nil && mounted {
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to ensure %s is mounted: %w", v.Target, err)
	}
	snapshotter, err := r.imageSnapshotter(ctx, v.Image.image)
	if err != nil {
		return fmt.Errorf("failed to unpack image volume: %w", err)
	}
	diffIDs, err := v.Image.image.RootFS(ctx)
	if err != nil {
		return fmt.Errorf("failed to get diff IDs for image volume %q: %w", v.Image.Ref, err)
	}
	sn := r.client.SnapshotService(snapshotter)
	labels := map[string]string{
		labelImageVolumeOwner:  v.Owner,
		labelImageVolumeTarget: v.Target,
		labelImageVolumeImage:  v.Image.Ref,
		labelGCRoot:            time.Now().UTC().Format(time.RFC3339),
	}
	opts := append([]snapshots.Opt{snapshots.WithLabels(labels)}, snapshotOpts(v.IDMap)...)
	mounts, err := sn.View(ctx, key, identity.ChainID(diffIDs).String(), opts...)
	if errdefs.IsAlreadyExists(err) {
		mounts, err = sn.Mounts(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("failed to prepare for image volume %q: %w", v.Image.Ref, err)
	}
	if err := os.MkdirAll(v.Target, 0o755); err != nil {
		return fmt.Errorf("failed to create directory to image volume target path %q: %w", v.Target, err)
	}
	if err := mount.All(readOnly(mounts), v.Target); err != nil {
		_ = mount.UnmountAll(v.Target, unix.MNT_DETACH)
		return fmt.Errorf("failed to mount image volume component %q: %w", v.Target, err)
	}
	return nil
}

// readOnly makes every mount of a view read-only: a view of one layer is a
// bind of the layer's directory, which must not be written through.
func readOnly(ms []mount.Mount) []mount.Mount {
	out := make([]mount.Mount, len(ms))
	for i, m := range ms {
		m.Options = append([]string(nil), m.Options...)
		hasRO := false
		for j, o := range m.Options {
			if o == "rw" {
				m.Options[j] = "ro"
			}
			hasRO = hasRO || m.Options[j] == "ro"
		}
		if !hasRO {
			m.Options = append(m.Options, "ro")
		}
		out[i] = m
	}
	return out
}

// ReleaseImageVolumes unmounts the owner's image volumes and removes their
// snapshots (and the empty mount points). A snapshot is removed only once
// its target is unmounted, so a failure leaves both for the next try.
func (r *Runtime) ReleaseImageVolumes(ctx context.Context, owner string) error {
	imageVolumeMu.Lock()
	defer imageVolumeMu.Unlock()
	var errs []error
	skipped := false
	for _, name := range r.snapshotters() {
		err := r.releaseImageVolumes(ctx, r.client.SnapshotService(name), owner)
		if r.snapshotterDown(name, err) {
			skipped = true
			continue // its volumes' mounts fail the pod dir's removal, retried
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil || skipped {
		return err
	}
	// The records go last: a volume left is still in use.
	return r.forgetImageVolumes(ctx, owner)
}

// An image volume is also recorded as a lease of containerd's, with no
// resources (it holds nothing from containerd's GC; the view's gc.root
// label does) and the labels of its snapshot: leases are containerd's
// metadata alone, so the images of the node's image volumes can be
// listed while the snapshotter they are views in does not answer yet,
// as the restarted stargz snapshotter does not until hostlet has handed
// it their credentials (lazycreds.go).

// imageVolumeLeaseID is the lease of the volume whose snapshot is key: a
// digest, as a key is longer than containerd's identifiers may be.
func imageVolumeLeaseID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "hostlet-image-volume-" + hex.EncodeToString(sum[:20])
}

// recordImageVolume makes the volume's lease unless it exists; before the
// view, so no volume is ever without one (one whose view failed has one
// until its owner's volumes are released).
func (r *Runtime) recordImageVolume(ctx context.Context, key string, v ImageVolume) error {
	_, err := r.client.LeasesService().Create(ctx, leases.WithID(imageVolumeLeaseID(key)), leases.WithLabels(map[string]string{
		labelImageVolumeOwner: v.Owner,
		labelImageVolumeImage: v.Image.Ref,
	}))
	if errdefs.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// forgetImageVolumes removes the owner's image volume leases.
func (r *Runtime) forgetImageVolumes(ctx context.Context, owner string) error {
	ls, err := r.client.LeasesService().List(ctx, fmt.Sprintf(`labels."%s"==%q`, labelImageVolumeOwner, owner))
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range ls {
		if err := r.client.LeasesService().Delete(ctx, l); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// imageVolumeLeaseImages are the images of the node's image volumes, from
// their leases: answered without any snapshotter.
func (r *Runtime) imageVolumeLeaseImages(ctx context.Context) (map[string]bool, error) {
	ls, err := r.client.LeasesService().List(ctx, fmt.Sprintf(`labels."%s"`, labelImageVolumeImage))
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, l := range ls {
		used[l.Labels[labelImageVolumeImage]] = true
	}
	return used, nil
}

// releaseImageVolumes is ReleaseImageVolumes in one snapshotter.
func (r *Runtime) releaseImageVolumes(ctx context.Context, sn snapshots.Snapshotter, owner string) error {
	type found struct{ key, target string }
	var all []found
	filter := fmt.Sprintf(`labels."%s"==%q`, labelImageVolumeOwner, owner)
	err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if strings.HasPrefix(info.Name, imageVolumeKeyPrefix) {
			all = append(all, found{info.Name, info.Labels[labelImageVolumeTarget]})
		}
		return nil
	}, filter)
	if err != nil {
		return fmt.Errorf("listing image volumes: %w", err)
	}
	var errs []error
	for _, f := range all {
		if f.target != "" {
			if err := mount.UnmountAll(f.target, unix.MNT_DETACH); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("failed to unmount image volume %q: %w", f.target, err))
				continue
			}
			if mounted, err := mountinfo.Mounted(f.target); err == nil && mounted {
				errs = append(errs, fmt.Errorf("image volume %q still mounted", f.target))
				continue
			}
			// Only the empty mount point: never what a mount still shows.
			if err := os.Remove(f.target); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			_ = os.Remove(filepath.Dir(f.target))
		}
		if err := sn.Remove(ctx, f.key); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to remove image volume snapshot %s: %w", f.key, err))
		}
	}
	return errors.Join(errs...)
}

// imageVolumeImages are the images the node's image volumes were made
// from: in use for image garbage collection while their pods hold them.
func (r *Runtime) imageVolumeImages(ctx context.Context) (map[string]bool, error) {
	used := map[string]bool{}
	for _, name := range r.snapshotters() {
		err := r.client.SnapshotService(name).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			if img := info.Labels[labelImageVolumeImage]; img != "" {
				used[img] = true
			}
			return nil
		}, fmt.Sprintf(`labels."%s"`, labelImageVolumeImage))
		if err != nil && !r.snapshotterDown(name, err) {
			return used, err
		}
	}
	return used, nil
}

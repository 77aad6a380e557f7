package runtime

import (
	"context"
	"fmt"
	"sort"
	"sync"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

// labelPinned is the label containerd's CRI plugin pins an image with (its
// sandbox image, or one an operator pinned): CRI reports it as pinned and
// the kubelet never garbage-collects it.
const labelPinned = "io.cri-containerd.pinned"

// StoredImage is one image in containerd as image GC sees it: all the
// names that point to one manifest, as CRI lists one image per ID.
type StoredImage struct {
	// ID is the digest the names point to.
	ID    string
	Names []string
	// Size is the content size, as CRI reports it.
	Size   int64
	Pinned bool
	// InUse: a container (running or not) was created from it, or a pod's
	// image volume is mounted from it.
	InUse bool
}

// ListImages lists the namespace's images with their sizes, pins and use.
func (r *Runtime) ListImages(ctx context.Context) ([]StoredImage, error) {
	imgs, err := r.client.ImageService().List(ctx)
	if err != nil {
		return nil, err
	}
	// Containers are listed after the images: one created from an image
	// pulled in between is in use by an image GC will not see yet.
	cs, err := r.client.ContainerService().List(ctx)
	if err != nil {
		return nil, err
	}
	// The kubelet's image GC counts image volumes as in use too: by their
	// snapshots' labels and by their leases, which answer while the
	// snapshotter they are views in does not.
	used, err := r.imageVolumeImages(ctx)
	if err != nil {
		return nil, err
	}
	leased, err := r.imageVolumeLeaseImages(ctx)
	if err != nil {
		return nil, err
	}
	for img := range leased {
		used[img] = true
	}
	for _, c := range cs {
		used[c.Image] = true
	}
	byID := map[string]*StoredImage{}
	for _, img := range imgs {
		id := img.Target.Digest.String()
		s := byID[id]
		if s == nil {
			size, err := r.imageSize(ctx, img)
			if err != nil && !errdefs.IsNotFound(err) {
				return nil, fmt.Errorf("size of image %s: %w", img.Name, err)
			}
			s = &StoredImage{ID: id, Size: size}
			byID[id] = s
		}
		s.Names = append(s.Names, img.Name)
		s.Pinned = s.Pinned || img.Labels[labelPinned] == "pinned"
		s.InUse = s.InUse || used[img.Name]
	}
	out := make([]StoredImage, 0, len(byID))
	for _, s := range byID {
		sort.Strings(s.Names)
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// sizes caches image sizes by target digest: the size is the sum of what
// the manifests declare, content-addressed, so it never goes stale, and the
// node status lists the images every round. Bounded: cleared when full.
var sizes struct {
	sync.Mutex
	m map[string]int64
}

const sizesMax = 1024

func (r *Runtime) imageSize(ctx context.Context, img images.Image) (int64, error) {
	key := img.Target.Digest.String()
	sizes.Lock()
	size, ok := sizes.m[key]
	sizes.Unlock()
	if ok {
		return size, nil
	}
	size, err := containerd.NewImage(r.client, img).Size(ctx)
	if err != nil {
		return 0, err
	}
	sizes.Lock()
	if sizes.m == nil || len(sizes.m) >= sizesMax {
		sizes.m = map[string]int64{}
	}
	sizes.m[key] = size
	sizes.Unlock()
	return size, nil
}

// RepoDigestsAndTags are the image's names as CRI lists them: the
// repository digests ("repo@sha256:...", each name's repository at the
// digest its names point to) and the tags, each sorted.
func (s StoredImage) RepoDigestsAndTags() (digests, tags []string) {
	seen := map[string]bool{}
	for _, n := range s.Names {
		if _, err := digest.Parse(n); err == nil {
			continue // an image ID as a name (CRI's own), no repository
		}
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		if _, ok := named.(reference.Tagged); ok {
			tags = append(tags, named.String())
		}
		d := reference.TrimNamed(named).String() + "@" + s.ID
		if c, ok := named.(reference.Canonical); ok {
			d = reference.TrimNamed(named).String() + "@" + c.Digest().String()
		}
		if !seen[d] {
			seen[d] = true
			digests = append(digests, d)
		}
	}
	sort.Strings(digests)
	sort.Strings(tags)
	return digests, tags
}

// RemoveImage removes every name of the image with that ID, the last one
// synchronously so its content and snapshots are gone when it returns.
// A name moved to another image meanwhile is left alone.
func (r *Runtime) RemoveImage(ctx context.Context, id string) error {
	imgs, err := r.client.ImageService().List(ctx, fmt.Sprintf("target.digest==%s", id))
	if err != nil {
		return err
	}
	for i, img := range imgs {
		opts := []images.DeleteOpt{images.DeleteTarget(&img.Target)}
		if i == len(imgs)-1 {
			opts = append(opts, images.SynchronousDelete())
		}
		if err := r.client.ImageService().Delete(ctx, img.Name, opts...); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("removing image %s: %w", img.Name, err)
		}
	}
	return nil
}

// ImageFsUsage is the capacity and available bytes of the filesystem
// containerd unpacks images on.
func (r *Runtime) ImageFsUsage(ctx context.Context) (capacity, available int64, err error) {
	dir, err := r.ImageFsDir(ctx)
	if err != nil {
		return 0, 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

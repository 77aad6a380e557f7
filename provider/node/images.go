package node

import (
	"context"
	"sort"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

// DefaultMaxImages is the kubelet's nodeStatusMaxImages default.
const DefaultMaxImages = 50

// maxNamesPerImage is the kubelet's MaxNamesPerImageInNodeStatus.
const maxNamesPerImage = 5

// Images lists the images on the node (runtime.Runtime).
type Images interface {
	ListImages(ctx context.Context) ([]runtime.StoredImage, error)
}

// NodeImages is the kubelet's Images status setter over its sorted image
// list: the largest images first (the larger ID first among equal sizes),
// at most max of them (-1: all), each with its repo digests then its repo
// tags, at most 5 names. The scheduler's ImageLocality reads them.
func NodeImages(imgs []runtime.StoredImage, max int32) []v1.ContainerImage {
	sorted := append([]runtime.StoredImage(nil), imgs...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Size == sorted[j].Size {
			return sorted[i].ID > sorted[j].ID
		}
		return sorted[i].Size > sorted[j].Size
	})
	if max > -1 && int(max) < len(sorted) {
		sorted = sorted[:max]
	}
	var out []v1.ContainerImage
	for _, img := range sorted {
		digests, tags := img.RepoDigestsAndTags()
		names := append(digests, tags...)
		if len(names) > maxNamesPerImage {
			names = names[:maxNamesPerImage]
		}
		out = append(out, v1.ContainerImage{Names: names, SizeBytes: img.Size})
	}
	return out
}

// images is the status's image list now; while the runtime does not
// answer, the one last reported (the kubelet reads a cache of its last
// listing).
func (n *Node) images(ctx context.Context, health error) []v1.ContainerImage {
	if n.cfg.Images != nil && health == nil {
		imgs, err := n.cfg.Images.ListImages(ctx)
		if err == nil {
			return NodeImages(imgs, n.cfg.MaxImages)
		}
		log.WithError(err).Warn("node: listing images for the node status")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node == nil {
		return nil
	}
	return n.node.Status.Images
}

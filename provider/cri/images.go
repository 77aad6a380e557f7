package cri

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"golang.org/x/sys/unix"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func (s *server) ListImages(ctx context.Context, r *criapi.ListImagesRequest) (*criapi.ListImagesResponse, error) {
	imgs, err := s.cfg.Images.CRIImages(ctx)
	if err != nil {
		return nil, err
	}
	out := &criapi.ListImagesResponse{Images: []*criapi.Image{}}
	if ref := r.GetFilter().GetImage().GetImage(); ref != "" {
		if img, ok := resolveImage(imgs, ref); ok {
			out.Images = append(out.Images, criImage(img))
		}
		return out, nil
	}
	for _, img := range imgs {
		out.Images = append(out.Images, criImage(img))
	}
	return out, nil
}

// ImageStatus answers an image it does not have with no image and no
// error, as CRI specifies (crictl and the kubelet ask it before a pull).
func (s *server) ImageStatus(ctx context.Context, r *criapi.ImageStatusRequest) (*criapi.ImageStatusResponse, error) {
	imgs, err := s.cfg.Images.CRIImages(ctx)
	if err != nil {
		return nil, err
	}
	img, ok := resolveImage(imgs, r.GetImage().GetImage())
	if !ok {
		return &criapi.ImageStatusResponse{}, nil
	}
	return &criapi.ImageStatusResponse{Image: criImage(img)}, nil
}

// resolveImage finds an image as containerd's CRI's LocalResolve: by its
// ID (the config digest, or a prefix of it, with or without "sha256:"),
// else by its normalized name.
func resolveImage(imgs []runtime.CRIImage, ref string) (runtime.CRIImage, bool) {
	if ref == "" {
		return runtime.CRIImage{}, false
	}
	if name, err := runtime.NormalizeImage(ref); err == nil {
		for _, img := range imgs {
			for _, n := range img.Names {
				if n == name {
					return img, true
				}
			}
		}
	}
	ids := make([]string, 0, len(imgs))
	for _, img := range imgs {
		ids = append(ids, img.ConfigDigest)
	}
	prefixed := ref
	if !strings.Contains(ref, ":") {
		prefixed = "sha256:" + ref
	}
	id, err := resolveID(ids, prefixed)
	if err != nil {
		return runtime.CRIImage{}, false
	}
	for _, img := range imgs {
		if img.ConfigDigest == id {
			return img, true
		}
	}
	return runtime.CRIImage{}, false
}

// criImage is an image as containerd's CRI lists it.
func criImage(img runtime.CRIImage) *criapi.Image {
	digests, tags := img.RepoDigestsAndTags()
	out := &criapi.Image{
		Id:          img.ConfigDigest,
		RepoTags:    tags,
		RepoDigests: digests,
		Size:        uint64(img.Size),
		Username:    img.Username,
		Pinned:      img.Pinned,
	}
	if img.UID != nil {
		out.Uid = &criapi.Int64Value{Value: *img.UID}
	}
	return out
}

// ImageFsInfo is the filesystem of the snapshotter images are unpacked
// into, which also holds the containers' writable layers: no container
// filesystems of their own, as containerd's CRI answers (the kubelet reads
// that as no split image filesystem). Its use is the filesystem's, as the node's
// /stats/summary imageFs reports it: containerd's CRI sums its snapshots'
// instead.
func (s *server) ImageFsInfo(ctx context.Context, _ *criapi.ImageFsInfoRequest) (*criapi.ImageFsInfoResponse, error) {
	dir, err := s.cfg.Images.ImageFsDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("image filesystem: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("image filesystem %s: %w", dir, err)
	}
	usage := fsUsage(dir, st, time.Now())
	return &criapi.ImageFsInfoResponse{
		ImageFilesystems: []*criapi.FilesystemUsage{usage},
	}, nil
}

func fsUsage(dir string, st unix.Statfs_t, now time.Time) *criapi.FilesystemUsage {
	return &criapi.FilesystemUsage{
		Timestamp:  now.UnixNano(),
		FsId:       &criapi.FilesystemIdentifier{Mountpoint: dir},
		UsedBytes:  &criapi.UInt64Value{Value: (st.Blocks - st.Bfree) * uint64(st.Bsize)},
		InodesUsed: &criapi.UInt64Value{Value: st.Files - st.Ffree},
	}
}
